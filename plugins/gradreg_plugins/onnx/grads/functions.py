"""The gradient of an op without a rule of its own whose ONNX schema defines it by a function
body (GroupNormalization, SoftmaxCrossEntropyLoss, Attention, RotaryEmbedding, ...): the
gradient of that body, instantiated on the op's inputs (:mod:`gradreg_plugins.onnx.expand`)."""
from __future__ import annotations

from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import per_input, through
from gradreg_plugins.onnx.schemas import all_schemas


def function_body_grad(op, *grads):
    """Differentiate ``op`` through its schema's function body: its gradients by ONNX input position."""
    # an optional dependency: function bodies come from the onnx package, which the family's other
    # rules do without
    from gradreg_plugins.onnx.expand import expand_function
    return through(op, grads, lambda *inputs: expand_function(op, inputs))


def _function_body_rule(op, *grads):
    return per_input(op, function_body_grad(op, *grads))


def register_function_body_gradients() -> list[str]:
    """Give every op with a function body and no rule (and not declared non-differentiable) the
    body's gradient; returns the op types it covered."""
    covered = []
    for schema in all_schemas():
        if schema.has_function and schema.op_type not in family.gradients and not schema.has_subgraphs:
            family.gradient(schema.op_type)(_function_body_rule)
            covered.append(schema.op_type)
    return covered
