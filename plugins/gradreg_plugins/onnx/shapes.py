"""Static shapes of onnx-family ops: ONNX's own shape inference, one node at a time.

An op built in Python (a gradient rule's, a user's) gets its output shapes from
``onnx.shape_inference.infer_node_outputs`` on the node's schema, with its inputs' dtypes,
static shapes and small constant values. Without the onnx package, or where ONNX's
inference cannot tell (variant inputs, subgraphs), the shapes stay unknown — the kernels do
not need them. A graph being imported skips this: the importer sets every shape from the
inference of the whole model (see :data:`IMPORTING`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gradreg.build.functions import function_graph
from gradreg.model.shape_inference import constant_value
from gradreg.model.shapes import TensorShape
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS, schema_for

# Key of Graph.resources set (to True) while the ONNX importer fills a graph.
IMPORTING = "onnx.importing"
_CONSTANT_LIMIT = 1024


def onnx_shape(ctx) -> Any:
    op = ctx.op
    if op.graph.resources.get(IMPORTING):
        return None
    try:
        return _infer(op)
    except ImportError:
        return None
    except Exception:   # ONNX cannot tell (or disagrees with a partially known input): unknown
        return None


def _infer(op) -> Any:
    # an optional dependency: without the onnx package, shapes stay unknown (ImportError)
    import onnx.defs
    import onnx.shape_inference
    from onnx import helper, numpy_helper

    from gradreg_plugins.onnx.protos import node_proto, type_proto

    schema = schema_for(op.type)
    if schema is None or schema.has_subgraphs:
        return None
    onnx_schema = onnx.defs.get_schema(schema.name, OPSET_VERSIONS[schema.domain], schema.domain)
    in_names = [f"in{i}" for i in range(len(op.inputs))]
    out_names = [f"out{i}" for i in range(len(op.outputs))]
    node = node_proto(op, in_names, out_names)
    types, data = {}, {}
    for name, t in zip(in_names, op.inputs):
        if t.dtype is None or t.dtype.kind == "v":
            return None
        types[name] = type_proto(t.dtype, t.shape)
        value = constant_value(t)
        if value is not None and np.size(value) <= _CONSTANT_LIMIT and t.dtype.kind in "fiub":
            data[name] = numpy_helper.from_array(np.asarray(value), name)
    opsets = [helper.make_opsetid(domain, version) for domain, version in OPSET_VERSIONS.items()]
    inferred = onnx.shape_inference.infer_node_outputs(onnx_schema, node, types, data, opset_imports=opsets)
    shapes = []
    for name in out_names:
        found = inferred.get(name)
        shapes.append(shape_of_type(found) if found is not None else TensorShape(None))
    return shapes if len(shapes) != 1 else shapes[0]


def shape_of_type(type_proto) -> TensorShape:
    """The static shape an onnx.TypeProto gives a tensor (symbolic dims are unknown)."""
    if type_proto.WhichOneof("value") != "tensor_type" or not type_proto.tensor_type.HasField("shape"):
        return TensorShape(None)
    return TensorShape([d.dim_value if d.HasField("dim_value") else None
                        for d in type_proto.tensor_type.shape.dim])


def subgraph_shapes(ctx) -> Any:
    """Output shapes of If, Loop and Scan from their bodies' output shapes (the library functions
    rebuilt with their arguments' recorded shapes): If merges its branches; Loop's carried values
    have the body's shapes, its scan outputs a leading axis of unknown length; Scan's scan
    outputs have that axis where scan_output_axes puts it."""
    op = ctx.op
    if op.graph.resources.get(IMPORTING):
        return None
    kind = op.type.rpartition("::")[2]
    attrs = ("then_branch", "else_branch") if kind == "If" else ("body",)
    try:
        graphs = [function_graph(op.graph.library, op.get_attr(a).name, {}, op.name) for a in attrs]
    except Exception:
        return None
    bodies = [g.outputs for g in graphs]
    if kind == "If":
        shapes = [_common(a.shape, b.shape) for a, b in zip(*bodies)]
        return shapes if len(shapes) != 1 else shapes[0]
    outs = [t.shape for t in bodies[0]][1 if kind == "Loop" else 0:]   # a Loop body first returns the condition
    carried = _states(op, kind)
    # A carried value may change shape from one iteration to the next: keep what its first and
    # every later value share.
    first = [t.shape for t in graphs[0].inputs[2 if kind == "Loop" else 0:][:carried]]
    shapes = [_common(a, b) for a, b in zip(outs[:carried], first)]
    shapes += [_with_scan_axis(s, op, kind, i) for i, s in enumerate(outs[carried:])]
    return shapes if len(shapes) != 1 else shapes[0]


def _common(a: TensorShape, b: TensorShape) -> TensorShape:
    """The dims two shapes agree on (unknown where they differ; unknown rank if the ranks do)."""
    if a.dims is None or b.dims is None or len(a.dims) != len(b.dims):
        return TensorShape(None)
    return TensorShape([x if x == y else None for x, y in zip(a.dims, b.dims)])


def _states(op, kind: str) -> int:
    """How many of the body's outputs (after Loop's condition) are carried values."""
    if kind == "Loop":
        return len(op.get_attr("T_v_initial"))
    return len(op.get_attr("T_initial_state_and_scan_inputs")) - op.get_attr("num_scan_inputs")


def _with_scan_axis(shape: TensorShape, op, kind: str, index: int) -> TensorShape:
    if shape.dims is None:
        return TensorShape(None)
    axis = 0
    if kind == "Scan":
        axes = op.get_attr("scan_output_axes")
        axis = axes[index] if axes else 0
        axis = axis + len(shape.dims) + 1 if axis < 0 else axis
    dims = list(shape.dims)
    dims.insert(axis, None)
    return TensorShape(dims)
