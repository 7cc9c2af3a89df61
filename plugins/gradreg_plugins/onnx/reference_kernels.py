"""The fallback kernel of every onnx-family op: the op's implementation in ``onnx.reference``
(needs the onnx package; :mod:`kernels` registers it for every op without a NumPy kernel and
imports this module when such a kernel is first built).

For each node, when a plan is compiled, the reference implementation class of the op (at the
family's opset) is instantiated once with the node's NodeProto; each call converts the
inputs to onnx's value forms, runs it and converts the results back (see
:mod:`gradreg_plugins.onnx.nodes`). Ops whose reference implementation is their schema's
function body run that body through onnx's ReferenceEvaluator. Faster NumPy kernels
(:mod:`kernels`) and the control-flow kernels (:mod:`control_flow`) replace this one
for their op types.
"""
from __future__ import annotations

import importlib
from typing import Any

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import RuntimeContextError
from onnx.reference.ops import load_op

from gradreg.errors import ExecutionError, UnknownOpError, describe_node
from gradreg_plugins.onnx.exporter import Exporter
from gradreg_plugins.onnx.nodes import (
    captured_inputs,
    from_onnx_value,
    input_layout,
    output_layout,
    schema_of,
    to_onnx_array,
    upsample_as_resize,
)
from gradreg_plugins.onnx.protos import node_proto, type_proto
from gradreg_plugins.onnx.schemas import OPSET_VERSIONS

__all__ = ["reference_kernel", "upsample_kernel"]


def _run_params() -> dict[str, Any]:
    return {"log": lambda *args: None, "opsets": dict(OPSET_VERSIONS), "verbose": 0, "new_ops": {},
            "existing_functions": {}, "evaluator_cls": ReferenceEvaluator}


def _reference_class(op, node) -> Any:
    """The onnx.reference implementation class of ``op`` (built from its schema's function body
    when onnx has no dedicated implementation)."""
    schema = schema_of(op)
    version = OPSET_VERSIONS[schema.domain]
    if schema.domain == "":
        try:
            return load_op("", schema.name, version, evaluator_cls=ReferenceEvaluator)
        except RuntimeContextError:
            types = [type_proto(t.dtype, t.shape) for t in op.inputs]
            layout = input_layout(op)
            return load_op("", schema.name, version, node=node, evaluator_cls=ReferenceEvaluator,
                           input_types=[types[i] for i in layout if i is not None])
    module = {"ai.onnx.ml": "aionnxml", "ai.onnx.preview.training": "aionnx_preview_training"}.get(
        schema.domain, "aionnx_preview")
    return importlib.import_module(f"onnx.reference.ops.{module}").load_op(schema.domain, schema.name, version)


def _subgraph_converter(op):
    """For an op with subgraph attributes but no gradreg kernel (FlexAttention's score_mod): the
    subgraphs as GraphProtos, for onnx.reference to run."""
    if not schema_of(op).has_subgraphs:
        return None
    if captured_inputs(op):
        raise UnknownOpError(f"{describe_node(op.name, op.type)}: onnx.reference cannot run subgraphs that "
                             f"use values of the enclosing graph")
    exporter = Exporter(op.graph)
    return lambda func: exporter.subgraph(func.name, [])


def reference_kernel(op, ctx):
    """Kernel factory running ``op`` with onnx.reference."""
    node = node_proto(op, graph_for=_subgraph_converter(op))
    try:
        impl = _reference_class(op, node)(node, _run_params())
    except Exception as exc:
        raise UnknownOpError(f"{describe_node(op.name, op.type)}: onnx.reference cannot run this node: "
                             f"{type(exc).__name__}: {exc}") from None
    in_layout = input_layout(op)
    out_layout = output_layout(op)
    in_dtypes = [t.dtype for t in op.inputs]
    out_dtypes = [t.dtype for t in op.outputs]
    single = len(op.outputs) == 1

    def compute(*args):
        values = [None if i is None else to_onnx_array(args[i], in_dtypes[i]) for i in in_layout]
        results = impl.run(*values)
        outs = []
        for position, index in enumerate(out_layout):
            if index is None:
                continue
            if position >= len(results):
                raise ExecutionError(f"{describe_node(op.name, op.type)}: onnx.reference gave {len(results)} "
                                     f"outputs, output {position} is missing", op.name, op.type)
            outs.append(from_onnx_value(results[position], out_dtypes[index]))
        return outs[0] if single else tuple(outs)
    return compute


def upsample_kernel(op, ctx):
    """Upsample (deprecated since opset 10) as the Resize it stands for (asymmetric coordinates,
    floor for "nearest"), on onnx.reference's Resize, which supports every mode."""
    mode = op.get_attr("mode")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"],
                            **upsample_as_resize(mode.decode() if isinstance(mode, bytes) else (mode or "nearest")))
    graph = helper.make_graph([node], "upsample", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, None),
                                                   helper.make_tensor_value_info("scales", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    opsets = [helper.make_opsetid("", OPSET_VERSIONS[""])]
    evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=opsets))

    def compute(x, scales):
        out = evaluator.run(None, {"x": x.astype(np.float64), "scales": np.asarray(scales, np.float32)})
        return np.asarray(out[0]).astype(x.dtype, copy=False)
    return compute
