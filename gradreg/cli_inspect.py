"""What ``gradreg inspect GRAPH`` reports about a graph file: its signature, its op types (those
inside library functions counted separately), its functions, and with ``--nodes`` one line per
node. A model file that declares its inputs and outputs (ONNX) gives them under its own names,
with symbolic dimensions by name, and facts about the file (producer, IR version, opsets); a
GraphDef's are found: inputs are the placeholders, outputs the tensors nothing consumes that are
results, not loop internals or control-flow and variable plumbing.

    >>> summary = graph_summary(load_graph("model.pb"))
    >>> summary["signature"]["inputs"]
    [{'name': 'x:0', 'dtype': 'float32', 'shape': [None, 784]}]
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import os
import re
import stat
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from gradreg import config
from gradreg.errors import GradregError
from gradreg.file_access import check_named_file
from gradreg.formats import format_for_path
from gradreg.formats.graphdef import BINARY
from gradreg.model.frames import ENTER, EXIT, LOOP_COND, NEXT_ITERATION, SWITCH, LoopStructure, is_loop_merge
from gradreg.model.graph import FunctionLibrary, Graph, NodeReader, Operation, Tensor, parse_input_name
from gradreg.model.model_file import DeclaredTensor, model_file
from gradreg.model.node_bytes import read_table, split_graph_def
from gradreg.model.shapes import TensorShape
from gradreg.model.traversal import topological_order

PLACEHOLDERS = frozenset({"Placeholder", "PlaceholderV2", "PlaceholderWithDefault"})

# Sinks that are not results: constants, no-ops and assertions; v1 control-flow plumbing (a
# Switch's unused branch, a loop's Enter/NextIteration/LoopCond); variables and their reads,
# writes and initialization checks, and checkpoint save/restore nodes.
NOT_OUTPUTS = frozenset({
    "Const", "NoOp", "Assert", "ControlTrigger", "Print", "PrintV2",
    *PLACEHOLDERS, *SWITCH, *ENTER, *NEXT_ITERATION, LOOP_COND,
    "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "Assign", "AssignVariableOp",
    "AssignAdd", "AssignSub", "AssignAddVariableOp", "AssignSubVariableOp", "VarIsInitializedOp",
    "IsVariableInitialized", "DestroyResourceOp",
    "SaveV2", "SaveSlices", "Save", "RestoreV2", "RestoreSlice", "Restore", "MergeV2Checkpoints",
    "ShardedFilename", "ShardedFilespec", "StringJoin",
})
SAVE_RESTORE = frozenset({"SaveV2", "SaveSlices", "Save", "RestoreV2", "RestoreSlice", "Restore",
                          "MergeV2Checkpoints"})


def shape_list(shape: TensorShape | None) -> list[int | None] | None:
    """A shape as JSON has it: a list with None for unknown dimensions, None for unknown rank."""
    if shape is None or shape.dims is None:
        return None
    return list(shape.dims)


def shape_text(shape: list[int | str | None] | None) -> str:
    """``[N, 3, ?]``: a symbolic dimension by its name, an unknown one as ``?``."""
    return "<unknown rank>" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def tensor_info(t: Tensor) -> dict[str, Any]:
    return {"name": t.name, "dtype": t.dtype.name if t.dtype is not None else None, "shape": shape_list(t.shape)}


def declared_info(d: DeclaredTensor) -> dict[str, Any]:
    """A declared input or output: its name in the file, declared dtype and shape (symbolic
    dimensions by name), and the graph's tensor."""
    return {"name": d.name, "dtype": d.dtype, "shape": None if d.shape is None else list(d.shape),
            "tensor": d.tensor.name}


def default_outputs(graph: Graph) -> list[Tensor]:
    """What ``gradreg run`` fetches without ``--fetch``: the outputs ``inspect`` lists (a model file's
    declared outputs, else the graph's results)."""
    declared = model_file(graph)
    if declared is not None and declared.outputs:
        return [d.tensor for d in declared.outputs]
    return real_outputs(graph)


def _loop_ops(graph: Graph) -> set[Operation]:
    """The ops inside v1 loop frames (empty if the frames cannot be worked out)."""
    ops = graph.get_operations()
    if not any(op.type in ENTER for op in ops):
        return set()
    try:
        structure = LoopStructure(topological_order(ops))
    except GradregError:
        return set()
    return {op for op, frame in structure.frame_of.items()
            if frame.parent is not None and structure.value_frame(op).parent is not None}


def _saver_plumbing(op: Operation) -> bool:
    """Nodes a TF1 Saver adds after its save or restore ops (save/control_dependency), and the
    ends of a ``tf.tuple`` nobody reads (its Identities wait on a ``tuple/group_deps`` NoOp:
    TF1 optimizers leave one per gradient of an input)."""
    return any(c.type in SAVE_RESTORE or c.name.endswith("tuple/group_deps") for c in op.control_inputs) or any(
        t.op.type in SAVE_RESTORE for t in op.inputs)


def _feeds_only_saver(op: Operation) -> bool:
    """A placeholder that only feeds a Saver's file name (save/filename, save/Const)."""
    consumers = [c for t in op.outputs for c in t.consumers_view()]
    return bool(consumers) and all(
        c.type in SAVE_RESTORE or _saver_plumbing(c) or (c.type in PLACEHOLDERS and _feeds_only_saver(c))
        for c in consumers)


PASS_THROUGH = frozenset({"Identity", "Snapshot", "StopGradient"})
LOOPS = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"})
CONSTANTS = frozenset({"Const", "VarHandleOp", "VariableV2", "Variable", "Placeholder", "PlaceholderV2"})


def _used(tensors: list[Tensor], scope: str) -> bool:
    """Whether one of ``tensors`` feeds something other than a dangling Identity that the loop
    added in its own name scope (TF2 puts one on every While output)."""
    for t in tensors:
        for c in t.consumers_view():
            dangling = c.type in PASS_THROUGH and not any(o.consumers_view() for o in c.outputs)
            if not (dangling and c.name.startswith(scope + "/")):
                return True
    return False


def _plumbing(op: Any, graph: Graph | None) -> bool:
    """A sink that only passes on a constant, a variable, or a loop variable nobody reads while
    the loop's other results are used (a While's unused outputs; a TF1 loop has an Exit per loop
    variable, the counter's among them)."""
    if not op.outputs:
        return False
    source_tensor = op.outputs[0]
    if op.type not in EXIT:
        while source_tensor.op.type in PASS_THROUGH and source_tensor.op.inputs:
            source_tensor = source_tensor.op.inputs[0]
        if source_tensor.op is op:
            return False
    source = source_tensor.op
    if source.type in CONSTANTS:
        return True
    if source.type in LOOPS:
        return _used([t for t in source.outputs if t is not source_tensor], source.name)
    if source.type in EXIT and graph is not None:
        scope = source.name.rpartition("/")[0]
        siblings = [o.outputs[0] for o in graph.operations()
                    if o.type in EXIT and o is not source and o.name.rpartition("/")[0] == scope]
        return _used(siblings, scope)
    return False


def real_outputs(graph: Graph) -> list[Tensor]:
    """Tensors nobody consumes, of ops that compute a result, outside loops: not NOT_OUTPUTS,
    not an op used as a control dependency (a cond's switch_t), not the unused second output of
    an op whose first is used, not plumbing (see _plumbing)."""
    inside_loops = _loop_ops(graph)
    out = []
    for op in graph.operations():
        # The commonest reason first, cheaply: a graph of a million nodes is a million of these.
        outputs = op.outputs
        if len(outputs) == 1 and outputs[0].consumers_view():
            continue
        if not any(t.consumers_view() for t in outputs) and _is_result(op, graph, inside_loops):
            out.extend(op.outputs)
    return out


def _is_result(op: Any, graph: Graph | None, inside_loops: set[Operation]) -> bool:
    """Whether ``op``, whose outputs nobody consumes, computes a result (see real_outputs). ``op``
    is an Operation, or a view of one in a graph not built (QuickGraph, which has no v1 loops:
    ``graph`` is None there)."""
    return not (op.type in NOT_OUTPUTS or op in inside_loops or is_loop_merge(op) or _saver_plumbing(op)
                or op.control_outputs or _plumbing(op, graph))


def node_info(op: Operation) -> dict[str, Any]:
    """One node for ``--nodes``: name, op type, inputs (control inputs as ^name), outputs."""
    return {"name": op.name, "op": op.type,
            "inputs": [t.name for t in op.inputs] + [f"^{c.name}" for c in op.control_inputs],
            "outputs": [{"dtype": t.dtype.name if t.dtype is not None else None, "shape": shape_list(t.shape)}
                        for t in op.outputs]}


def function_summary(graph: Graph) -> dict[str, dict[str, Any]]:
    """Per library function: its node count and op-type histogram."""
    out: dict[str, dict[str, Any]] = {}
    for name in graph.library.names():
        fdef = graph.library.get(name)
        nodes = list(fdef.node_def) if fdef is not None else []
        histogram = collections.Counter(node.op for node in nodes)
        out[name] = {"nodes": len(nodes), "op_types": dict(sorted(histogram.items()))}
    return out


def graph_summary(graph: Graph, nodes: bool = False) -> dict[str, Any]:
    """What ``gradreg inspect GRAPH --json`` prints."""
    ops = graph.get_operations()
    functions = function_summary(graph)
    in_functions: collections.Counter[str] = collections.Counter()
    for info in functions.values():
        in_functions.update(info["op_types"])
    declared = model_file(graph)
    if declared is not None:
        signature = {"inputs": [declared_info(d) for d in declared.inputs],
                     "outputs": [declared_info(d) for d in declared.outputs]}
    else:
        signature = {"inputs": [tensor_info(op.outputs[0]) for op in ops
                                if op.type in PLACEHOLDERS and not _feeds_only_saver(op)],
                     "outputs": [tensor_info(t) for t in real_outputs(graph)]}
    summary: dict[str, Any] = {
        "nodes": len(ops),
        "signature": signature,
        "op_types": dict(sorted(collections.Counter(op.type for op in ops).items())),
        "function_nodes": sum(info["nodes"] for info in functions.values()),
        "function_op_types": dict(sorted(in_functions.items())),
        "functions": functions,
    }
    if declared is not None:
        summary["model"] = {"format": declared.format, **declared.facts}
    if nodes:
        summary["node_list"] = [node_info(op) for op in ops]
    return summary


def summary_lines(path: str, summary: dict[str, Any]) -> list[str]:
    """The text form of :func:`graph_summary`."""
    lines = [f"graph: {path}"]
    if "model" in summary:
        facts = dict(summary["model"])
        lines.append(f"model: {facts.pop('format').upper()}")
        lines += [f"  {key}: {value}" for key, value in facts.items()]
    lines.append(f"nodes: {summary['nodes']}" + (
        f" (+ {summary['function_nodes']} inside {_count(len(summary['functions']), 'function')})"
        if summary["functions"] else ""))
    for kind in ("inputs", "outputs"):
        tensors = summary["signature"][kind]
        lines.append(f"{kind}:" if tensors else f"{kind}: none")
        unknown = kind == "outputs" and "quick" in summary      # shapes not inferred: not "unknown"
        lines += [f"  {t['name']}  {t['dtype'] or '?'} "
                  f"{'(shape not inferred)' if unknown else shape_text(t['shape'])}" for t in tensors]
    if "quick" in summary:
        lines.append(f"read quickly (over {summary['quick']['from_nodes']:,} nodes, the graph was not built): "
                     f"output shapes not inferred, dtypes and cycles not checked; --full builds it")
    lines.append("op types:")
    lines += _histogram_lines(summary["op_types"])
    if summary["functions"]:
        lines.append(f"functions ({len(summary['functions'])}):")
        lines += [f"  {name}  {info['nodes']} nodes" for name, info in summary["functions"].items()]
        lines.append("op types inside functions:")
        lines += _histogram_lines(summary["function_op_types"])
    else:
        lines.append("functions: none")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _histogram_lines(histogram: dict[str, int]) -> list[str]:
    return [f"  {count:6d}  {op_type}" for op_type, count in sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))]


def node_lines(summary: dict[str, Any]) -> list[str]:
    """``--nodes``: one line per node, ``name  op  (inputs) -> dtype [shape], ...``."""
    lines = []
    for node in summary["node_list"]:
        outputs = ", ".join(f"{o['dtype'] or '?'} {shape_text(o['shape'])}" for o in node["outputs"]) or "-"
        lines.append(f"{node['name']}  {node['op']}({', '.join(node['inputs'])}) -> {outputs}")
    return lines


# -- a big GraphDef, summarized without building it ------------------------------------------

QUICK_FROM = 100_000     # nodes: a GraphDef this big is summarized from its node table
QUICK_CANDIDATES = 10_000   # nodes nobody reads: up to this many (or a quarter of the nodes), it still is


def quick_graph_summary(path: str) -> dict[str, Any] | None:
    """:func:`graph_summary` of a binary GraphDef of QUICK_FROM nodes or more, read without
    building the graph (~1 s for 10**6 nodes, where building it takes ~10): node names, op types
    and inputs are read as columns (gradreg.model.node_bytes.read_table) and only the nodes the
    signature needs -- placeholders, nodes nobody consumes, and what the output rules look at --
    are made into Operations, without inputs. What it does not do: infer shapes (an output's
    shape is not known, an input's is the one its placeholder declares), check input dtypes,
    attrs other than those nodes' or cycles -- ``gradreg check`` loads the graph and does.

    None (for the caller to load the graph) for anything else: a smaller graph, another format,
    a file that is not a regular one, v1 loops (Enter/Exit), nodes not laid out as protobuf
    writes them, duplicate or missing names, inputs naming missing nodes, more nodes than the
    limit (loading the graph then says what is wrong), or more nodes nobody reads than
    QUICK_CANDIDATES and a quarter of the nodes (each is looked at: building the graph is
    faster then)."""
    check_named_file(path, path)
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size < QUICK_FROM * 8 or format_for_path(path) is not BINARY:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    quick = QuickGraph.read(data, path, config.max_nodes)
    if quick is None:
        return None
    return quick.summary()


class QuickGraph:
    """A GraphDef's node table (gradreg.model.node_bytes.NodeTable) with its inputs resolved to
    node numbers, and views of its nodes (_OpView) made on demand: what graph_summary's rules
    look at, without an Operation and a Tensor for each node."""

    def __init__(self, table: Any, nodes: list[bytes], template: Any, source: str, producer: Any, port: Any,
                 control: Any):
        self.table, self.nodes, self.source = table, nodes, source
        self.producer, self.port, self.control = producer, port, control
        self.consumer = np.repeat(np.arange(len(table), dtype=np.int64), np.diff(table.input_start))
        # the nodes nobody reads: the candidates for outputs, each looked at (tens of us)
        self.unconsumed = np.flatnonzero(np.bincount(producer[~control], minlength=len(table)) == 0)
        self.graph = Graph()        # for op definitions: the registry's and the file's functions
        self.graph.share_library(FunctionLibrary(template.library))
        self.reader = NodeReader(self.graph, source)
        self._views: dict[int, _OpView] = {}
        self._consumers: Any = None

    @classmethod
    def read(cls, data: bytes, source: str, max_nodes: int) -> QuickGraph | None:
        """The QuickGraph of a binary GraphDef's bytes, or None (see quick_graph_summary)."""
        try:
            template, nodes = split_graph_def(data)
        except (DecodeError, ValueError, RuntimeError):
            return None
        n = len(nodes)
        if n < QUICK_FROM or n > max_nodes:
            return None
        table = read_table(nodes)
        if table is None:
            return None
        index = dict(zip(table.names, range(n)))
        op_types = set(table.ops)
        if (len(index) != n or "" in index or "" in op_types or op_types & (ENTER | EXIT)
                or re.search(r"[\x00-\x1f\x7f]", "".join(op_types)) or re.search(r"[\x00-\x1f\x7f]", "".join(index))):
            return None
        inputs = table.inputs
        producer = np.fromiter(map(index.get, inputs, itertools.repeat(-1)), np.int64, len(inputs))
        port = np.zeros(len(inputs), np.int64)
        control = np.zeros(len(inputs), bool)
        for k in np.flatnonzero(producer < 0).tolist():     # x:1, ^x (and missing nodes)
            name, at, is_control = parse_input_name(inputs[k])
            found = index.get(name)
            if found is None:
                return None
            producer[k], port[k], control[k] = found, at, is_control
        quick = cls(table, nodes, template, source, producer, port, control)
        if quick.unconsumed.size > max(QUICK_CANDIDATES, n // 4):
            return None      # looking at each would take longer than building the graph
        return quick

    def view(self, i: int) -> _OpView:
        found = self._views.get(i)
        if found is None:
            found = self._views[i] = _OpView(self, i)
        return found

    def _reading(self, i: int, control: bool) -> Any:
        """The positions (in the inputs) of the data or control inputs naming node i, found in an
        index of all inputs by producer, built once (a summary asks for a few nodes' readers)."""
        if self._consumers is None:
            key = self.producer * 2 + self.control
            order = np.argsort(key, kind="stable")
            self._consumers = (order, key[order])
        order, sorted_keys = self._consumers
        lo, hi = np.searchsorted(sorted_keys, [2 * i + control, 2 * i + control + 1])
        return order[lo:hi]

    def consumers(self, i: int, port: int) -> list[_OpView]:
        """The nodes with output ``port`` of node i among their data inputs."""
        found = self._reading(i, False)
        return [self.view(int(c)) for c in self.consumer[found[self.port[found] == port]].tolist()]

    def control_consumers(self, i: int) -> list[_OpView]:
        return [self.view(int(c)) for c in self.consumer[self._reading(i, True)].tolist()]

    def summary(self) -> dict[str, Any]:
        """graph_summary's dict, with ``quick`` saying what was not done."""
        table = self.table
        n = len(table)
        outputs: list[_TensorView] = []
        for i in self.unconsumed.tolist():
            if table.ops[i] in NOT_OUTPUTS:
                continue
            op = self.view(i)
            if op.outputs and _is_result(op, None, set()):
                outputs.extend(op.outputs)
        placeholders = [self.view(i) for i, t in enumerate(table.ops) if t in PLACEHOLDERS]
        functions = function_summary(self.graph)
        in_functions: collections.Counter[str] = collections.Counter()
        for info in functions.values():
            in_functions.update(info["op_types"])
        return {
            "nodes": n,
            "signature": {"inputs": [tensor_info(op.outputs[0]) for op in placeholders  # type: ignore[arg-type]
                                     if op.outputs and not _feeds_only_saver(op)],  # type: ignore[arg-type]
                          "outputs": [{**tensor_info(t), "shape": None} for t in outputs]},  # type: ignore[arg-type]
            "op_types": dict(sorted(collections.Counter(table.ops).items())),
            "function_nodes": sum(info["nodes"] for info in functions.values()),
            "function_op_types": dict(sorted(in_functions.items())),
            "functions": functions,
            "quick": {"from_nodes": QUICK_FROM, "shapes": "not inferred",
                      "not checked": ["input dtypes", "attrs of most nodes", "cycles"]},
        }


class _OpView:
    """A node of a QuickGraph as the summary rules see an Operation: name, type, outputs (typed
    from the node's attrs), inputs, control inputs and outputs."""

    def __init__(self, quick: QuickGraph, i: int):
        self._quick, self._i = quick, i
        self.name: str = quick.table.names[i]
        self.type: str = quick.table.ops[i]
        self._outputs: list[_TensorView] | None = None
        self._in: tuple[list[_TensorView], list[_OpView]] | None = None

    @property
    def outputs(self) -> list[_TensorView]:
        if self._outputs is None:
            quick = self._quick
            op = quick.reader.operation(quick.nodes[self._i])
            if op.type in PLACEHOLDERS and op.outputs:      # the shape it declares (outputs' are not inferred)
                with contextlib.suppress(GradregError):
                    op.outputs[0].shape = op.get_attr("shape")
            self._outputs = [_TensorView(self, k, t.dtype, t.shape) for k, t in enumerate(op.outputs)]
        return self._outputs

    def _edges(self) -> tuple[list[_TensorView], list[_OpView]]:
        """(data inputs, control inputs), made once."""
        if self._in is None:
            quick = self._quick
            start, stop = int(quick.table.input_start[self._i]), int(quick.table.input_start[self._i + 1])
            data: list[_TensorView] = []
            controls: list[_OpView] = []
            for producer, port, control in zip(quick.producer[start:stop].tolist(), quick.port[start:stop].tolist(),
                                               quick.control[start:stop].tolist()):
                view = quick.view(producer)
                if control:
                    controls.append(view)
                    continue
                outputs = view.outputs
                data.append(outputs[port] if port < len(outputs) else _TensorView(view, port, None, None))
            self._in = (data, controls)
        return self._in

    @property
    def inputs(self) -> list[_TensorView]:
        return self._edges()[0]

    @property
    def control_inputs(self) -> list[_OpView]:
        return self._edges()[1]

    @property
    def control_outputs(self) -> list[_OpView]:
        return self._quick.control_consumers(self._i)


class _TensorView:
    """An output of an _OpView."""

    def __init__(self, op: _OpView, value_index: int, dtype: Any, shape: TensorShape | None):
        self.op, self.value_index, self.dtype = op, value_index, dtype
        self.shape = shape if shape is not None else TensorShape(None)

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.value_index}"

    def consumers_view(self) -> list[_OpView]:
        return self.op._quick.consumers(self.op._i, self.value_index)
