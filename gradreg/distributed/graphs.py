"""What the driver does to a graph before the workers get it: free a fixed batch, thaw frozen weights.

**A fixed batch.** TensorFlow writes a placeholder's batch size into the graph when the model
had one (a TF1 placeholder ``[128, 784]``, a frozen Keras model built for batch 8), and a
shard of 64 examples would not fit it. :func:`free_batch` sets the split feeds' batch
dimension to unknown in the GraphDef and loads it again, so every shape is inferred anew.
Then it looks for nodes that *pin* the batch: ops on the batch's path whose output keeps
the written batch size where the batch should be. It finds them by loading the graph once
more with the batch set to a probe size: a tensor whose written shape has the batch size
on some axis should have the probe size there; one that keeps the written size on an axis
where the batch was (and has the probe size on none), or whose shape inference fails, is
pinned. A scalar constant equal to the batch size that meets the batch's path after the
batch was reduced away (``sum / 128``) is reported too: it would scale each shard's loss
by the wrong count.

One pin is undone, because TensorFlow writes it itself: where it knew a tensor's shape,
``tf.shape(t)`` became a Const (softmax_cross_entropy_with_logits reshapes its result to
``Const [8, 5][:1]``). Such a Const (an integer vector equal to the written shape of a
tensor on the batch's path, batch size included) becomes ``Shape(t)`` again, of a split
feed of that shape if there is one, else of a tensor its consumers already depend on.
Anything else pinned is a :class:`BatchPinnedError` naming each node and why, with the
ways out: ``relax_batch=False`` (``--no-relax-batch``), where each shard must then hold
exactly the written batch size (feed ``shards x 128`` examples), or the model exported at
the shard size.

**Frozen weights.** A frozen model's weights are Consts. :func:`thaw_constants` turns each
named Const ``w`` into a resource variable ``w/variable`` initialised with its value, and
``w`` into the ``ReadVariableOp`` of it, so every consumer reads the variable and the
optimizers can update it; the trained weights are saved under ``w/variable``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

import gradreg as gr
from gradreg.errors import FeedError, GradregError, ShapeError
from gradreg.model import attrs
from gradreg.model.tensor_util import to_ndarray
from gradreg.proto import graph_pb2, node_def_pb2

PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")


class BatchPinnedError(FeedError):
    """The graph fixes the batch size at a node, so a batch cannot be split across workers."""


@dataclass
class Pin:
    """A node that keeps the written batch size: its name, op type and why it matters."""
    node: str
    op_type: str
    reason: str

    def __str__(self) -> str:
        return f"node '{self.node}' (op {self.op_type}) {self.reason}"


@dataclass
class BatchReport:
    """What :func:`free_batch` did: the batch size the graph was written with (None if none was
    fixed), the placeholders it freed, the Consts it turned back into Shape ops."""
    batch: int | None = None
    freed: list[str] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)


def static_batch(graph: gr.Graph, axes: Mapping[str, int]) -> int | None:
    """The batch size written into the split feeds (None if none is fixed); FeedError if they disagree."""
    sizes = {}
    for name, axis in axes.items():
        try:
            dims = graph.get_tensor(name).shape.as_list()
        except GradregError:
            raise FeedError(f"split names '{name}', which is no tensor of the graph") from None
        if dims is not None and -len(dims) <= axis < len(dims) and dims[axis] is not None:
            sizes[name] = dims[axis]
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"'{n}': {s}" for n, s in sizes.items())
        raise FeedError(f"the split feeds have different batch sizes written in the graph ({listed})")
    return next(iter(sizes.values()), None)


def free_batch(graph_def: graph_pb2.GraphDef, axes: Mapping[str, int]
               ) -> tuple[graph_pb2.GraphDef, BatchReport]:
    """The GraphDef with the split feeds' batch dimension unknown, and what changed.

    ``axes``: the split feeds' tensor names and batch axes. Raises :class:`BatchPinnedError`
    naming the nodes that keep the batch size fixed (see the module docstring).
    """
    written = gr.load_graph(graph_def.SerializeToString())
    batch = static_batch(written, axes)
    report = BatchReport(batch=batch)
    if batch is None:
        return graph_def, report
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    report.freed = _set_batch(out, axes, -1)
    for _ in range(8):       # each Const made a Shape again can let the probe see one step further
        pins, foldable = _pins(written, out, axes, batch)
        if not foldable:
            break
        for const, (source, dtype) in foldable.items():
            _const_to_shape(out, const, source, dtype)
            report.unpinned.append(const)
    if pins:
        raise BatchPinnedError(_pinned_message(pins, batch, axes))
    gr.load_graph(out.SerializeToString())     # shape inference on the freed graph: must pass
    return out, report


def specialize(graph_bytes: bytes, axes: Mapping[str, int], size: int) -> bytes:
    """The GraphDef bytes with the split feeds' batch dimension set to ``size``: shape inference
    then knows every batch-sized dimension, and the plan folds the shape arithmetic a free batch
    leaves to run time (see :class:`.worker.Replica`)."""
    graph_def = graph_pb2.GraphDef.FromString(graph_bytes)
    _set_batch(graph_def, axes, size)
    return graph_def.SerializeToString(deterministic=True)


def _set_batch(graph_def: graph_pb2.GraphDef, axes: Mapping[str, int], size: int) -> list[str]:
    """Set the batch dimension of the split placeholders in place; the names of those changed."""
    by_name = {node.name: node for node in graph_def.node}
    changed = []
    for tensor, axis in axes.items():
        node = by_name.get(tensor.split(":")[0])
        if node is None or node.op not in PLACEHOLDERS:
            continue
        value = attrs.get_entry(node.attr, "shape")
        if value is None or value.shape.unknown_rank or not -len(value.shape.dim) <= axis < len(value.shape.dim):
            continue
        value.shape.dim[axis].size = size
        _drop_attr(node, "_output_shapes")     # TensorFlow's record of the written shapes
        changed.append(node.name)
    return changed


def _probe_size(batch: int, graph: gr.Graph) -> int:
    """A batch size for the probe that no static dimension of the graph has, nor divides nicely."""
    seen = {d for op in graph.get_operations() for t in op.outputs
            for d in (t.shape.as_list() or []) if d is not None}
    size = 2 * batch + 1
    while size in seen:
        size += 2
    return size


def _pins(written: gr.Graph, freed: graph_pb2.GraphDef, axes: Mapping[str, int], batch: int
          ) -> tuple[list[Pin], dict[str, tuple[str, int]]]:
    """The pinned nodes of ``freed`` and, of those, the Consts that can become Shape ops again
    (Const name -> the tensor whose shape it is)."""
    probe = _probe_size(batch, written)
    probed_def = graph_pb2.GraphDef()
    probed_def.CopyFrom(freed)
    _set_batch(probed_def, axes, probe)
    failed: tuple[str, str] | None = None
    where = "<bytes>: "      # load_graph's prefix for a graph read from bytes
    try:
        probed = gr.load_graph(probed_def.SerializeToString())
    except ShapeError as exc:
        failed = (_node_named(str(exc)), str(exc))
        probed = None
    path = _batch_path(written, axes)
    pins: list[Pin] = []
    foldable: dict[str, tuple[str, int]] = {}
    for op in path:
        if failed is not None and op.name == failed[0]:
            reason = f"fails shape inference once the batch is not {batch}: {failed[1].replace(where, '')}"
            pins.append(Pin(op.name, op.type, reason))
            _fold_candidates(op, written, path, axes, batch, foldable)
            continue
        if probed is None:
            continue
        found = _pinned_output(op, probed, batch, probe) or _constant_batch_scale(op, path, batch)
        if found:
            reason = found
            pins.append(Pin(op.name, op.type, reason))
            _fold_candidates(op, written, path, axes, batch, foldable)
    return pins, foldable


def _node_named(message: str) -> str:
    found = re.findall(r"node '([^']+)'", message)
    return found[-1] if found else ""


def _batch_path(graph: gr.Graph, axes: Mapping[str, int]) -> list:
    """The ops that depend on a split feed through data edges, in the graph's order."""
    reached: set = set()
    stack = [graph.get_tensor(name).op for name in axes]
    while stack:
        op = stack.pop()
        if op in reached:
            continue
        reached.add(op)
        stack.extend(c for t in op.outputs for c in t.consumers())
    return [op for op in graph.get_operations() if op in reached]


def _pinned_output(op, probed: gr.Graph, batch: int, probe: int) -> str | None:
    """Why ``op``'s output keeps the written batch size in the probed graph, if it does."""
    try:
        other = probed.get_operation_by_name(op.name)
    except (GradregError, KeyError):
        return None
    for written_t, probed_t in zip(op.outputs, other.outputs):
        before, after = written_t.shape.as_list(), probed_t.shape.as_list()
        if before is None or after is None or len(before) != len(after):
            continue
        batch_axes = [k for k, d in enumerate(before) if d == batch]
        if not batch_axes or any(after[k] == probe for k in batch_axes):
            continue
        if any(after[k] == batch for k in batch_axes):
            return (f"keeps the batch size {batch} in its output shape {after} when the batch is {probe}: "
                    f"a constant of its inputs fixes it")
    return None


def _constant_batch_scale(op, path: Sequence, batch: int) -> str | None:
    """A scalar Const equal to the batch size meeting the batch's path once the batch is reduced away."""
    if op.type not in ("RealDiv", "Div", "DivNoNan", "Mul", "TrueDiv"):
        return None
    outputs = [t.shape.as_list() for t in op.outputs]
    if not all(s == [] for s in outputs):
        return None
    for t in op.inputs:
        if t.op not in path and t.op.type == "Const" and np.ndim(_value(t.op)) == 0 and _value(t.op) == batch:
            return (f"scales by the constant '{t.op.name}' = {batch}, the batch size: each shard's result would "
                    f"be scaled by the written batch size instead of its own")
    return None


def _value(op) -> np.ndarray:
    return np.asarray(op.get_attr("value"))


def _fold_candidates(op, written: gr.Graph, path: Sequence, axes: Mapping[str, int], batch: int,
                     out: dict[str, tuple[str, int]]) -> None:
    """Integer vector Consts feeding ``op`` (directly or through shape arithmetic off the batch's
    path) that equal the written shape of a tensor on the batch's path: TensorFlow's folded tf.shape()."""
    stack, seen = list(op.inputs), set()
    on_path = set(path)
    while stack:
        t = stack.pop()
        if t.op in seen or t.op in on_path:
            continue
        seen.add(t.op)
        if t.op.type == "Const":
            value = _value(t.op)
            if value.ndim == 1 and value.dtype.kind == "i" and batch in value.tolist():
                source = _shape_source(value.tolist(), op, written, path, axes)
                if source is not None:
                    out[t.op.name] = (source, written.get_tensor(source).known_dtype.as_datatype_enum)
            continue
        stack.extend(t.op.inputs)


def _shape_source(shape: list[int], consumer, written: gr.Graph, path: Sequence,
                  axes: Mapping[str, int]) -> str | None:
    """A tensor on the batch's path whose written shape is ``shape`` and that ``consumer`` depends
    on already (so Shape of it adds no cycle): a split feed first."""
    for name in axes:
        if written.get_tensor(name).shape.as_list() == shape:
            return name
    ancestors: set = set()
    stack = [consumer]
    while stack:
        op = stack.pop()
        if op in ancestors:
            continue
        ancestors.add(op)
        stack.extend(t.op for t in op.inputs)
    for op in path:
        if op in ancestors and op is not consumer:
            for t in op.outputs:
                if t.shape.as_list() == shape:
                    return t.name
    return None


def _const_to_shape(graph_def: graph_pb2.GraphDef, const: str, source: str, source_dtype: int) -> None:
    """Replace the Const node ``const`` (in place) by ``Shape(source)`` of the same dtype and name."""
    for node in graph_def.node:
        if node.name == const:
            dtype = attrs.get_entry(node.attr, "dtype").type
            node.op = "Shape"
            del node.attr[:]
            _set_type(node, "T", source_dtype)
            _set_type(node, "out_type", dtype)
            del node.input[:]
            node.input.append(source[:-2] if source.endswith(":0") else source)
            return


def _drop_attr(node: node_def_pb2.NodeDef, key: str) -> None:
    for i in reversed(range(len(node.attr))):
        if node.attr[i].key == key:
            del node.attr[i]


def _set_type(node: node_def_pb2.NodeDef, key: str, dtype: int) -> None:
    attrs.set_entry(node.attr, key, attrs.to_attr_value(gr.as_dtype(dtype), "type"))


def _pinned_message(pins: Sequence[Pin], batch: int, axes: Mapping[str, int]) -> str:
    feeds = ", ".join(f"'{n}'" for n in axes)
    listed = "; ".join(str(p) for p in pins[:5]) + (f"; and {len(pins) - 5} more" if len(pins) > 5 else "")
    return (f"the graph fixes the batch size {batch} of {feeds}, so a batch cannot be split: {listed}. "
            f"Either pass relax_batch=False (--no-relax-batch): each shard then holds exactly {batch} examples "
            f"(feed shards x {batch}), or export the model at the shard size you want")


def thaw_constants(graph_def: graph_pb2.GraphDef, names: Sequence[str]) -> graph_pb2.GraphDef:
    """A copy of the GraphDef in which each named Const is a resource variable's read (see the module docstring)."""
    wanted = {n.split(":")[0] for n in names}
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    found = set()
    for node in list(out.node):
        if node.name not in wanted:
            continue
        if node.op != "Const":
            raise GradregError(f"xs: node '{node.name}' (op {node.op}) is not a Const, and only a frozen "
                               f"model's Consts become variables")
        found.add(node.name)
        _thaw(out, node)
    missing = sorted(wanted - found)
    if missing:
        raise GradregError(f"xs: no node named {', '.join(repr(m) for m in missing)} in the graph")
    return out


def _thaw(graph_def: graph_pb2.GraphDef, node: node_def_pb2.NodeDef) -> None:
    name, dtype = node.name, attrs.get_entry(node.attr, "dtype").type
    value = node_def_pb2.NodeDef()
    value.CopyFrom(node)
    value.name = f"{name}/variable/initial_value"
    shape = np.shape(to_ndarray(attrs.get_entry(node.attr, "value").tensor, name))
    handle = graph_def.node.add(name=f"{name}/variable", op="VarHandleOp")
    _set_type(handle, "dtype", dtype)
    attrs.set_entry(handle.attr, "shape", attrs.to_attr_value(gr.TensorShape(shape), "shape"))
    attrs.set_entry(handle.attr, "shared_name", attrs.to_attr_value(handle.name.encode(), "string"))
    graph_def.node.append(value)
    assign = graph_def.node.add(name=f"{name}/variable/Assign", op="AssignVariableOp")
    assign.input.extend([handle.name, value.name])
    _set_type(assign, "dtype", dtype)
    node.op = "ReadVariableOp"
    del node.attr[:]
    _set_type(node, "dtype", dtype)
    node.input.append(handle.name)
