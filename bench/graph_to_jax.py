"""JAX's contender on the TF-written CNN graphs: the GraphDef's ops translated to jax.numpy / lax.

    python bench/graph_to_jax.py [NAME ...]     # checks each CNN against TensorFlow's stored values

Reads forward.pb (with gradreg's reader: protobuf only, no TensorFlow) and builds a function of
the graph's input and weights; ``cnn_step`` jits its value and vector-Jacobian product, so JAX
computes what bench/foreign_cnn.py asks of gradreg and TensorFlow (the output and the gradients
w.r.t. the input and every weight, given a cotangent), from the same graph and weights. Only
the ops these graphs hold are translated (NHWC); another op raises NotImplementedError naming it.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np


def _padding(op, x_shape, f_shape, strides, dilations) -> Any:
    padding = op.get_attr("padding")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    if padding == "EXPLICIT":
        pads = list(op.get_attr("explicit_paddings"))
        return [(pads[2], pads[3]), (pads[4], pads[5])]
    return padding


def _conv(op, x, f, groups: int = 1):
    from jax import lax
    strides, dilations = list(op.get_attr("strides")), list(op.get_attr("dilations"))
    return lax.conv_general_dilated(x, f, window_strides=strides[1:3],
                                    padding=_padding(op, x.shape, f.shape, strides, dilations),
                                    rhs_dilation=dilations[1:3], dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=groups)


def _depthwise(op, x, f):
    kh, kw, c, m = f.shape
    return _conv(op, x, f.reshape(kh, kw, 1, c * m), groups=c)


def _pool(op, x, kind: str):
    import jax.numpy as jnp
    from jax import lax
    ksize, strides = list(op.get_attr("ksize")), list(op.get_attr("strides"))
    padding = op.get_attr("padding")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    if kind == "max":
        return lax.reduce_window(x, -jnp.inf, lax.max, ksize, strides, padding)
    total = lax.reduce_window(x, 0.0, lax.add, ksize, strides, padding)
    count = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, ksize, strides, padding)   # SAME: the window inside
    return total / count


def _matmul(op, a, b):
    if op.get_attr("transpose_a"):
        a = a.T
    if op.get_attr("transpose_b"):
        b = b.T
    return a @ b


def _mean(op, x, axes):
    import jax.numpy as jnp
    return jnp.mean(x, axis=tuple(int(a) for a in np.atleast_1d(axes)), keepdims=bool(op.get_attr("keep_dims")))


def _rules() -> dict[str, Callable[..., Any]]:
    import jax
    import jax.numpy as jnp
    from jax import lax
    return {
        "Identity": lambda op, x: x,
        "AddV2": lambda op, a, b: a + b, "Add": lambda op, a, b: a + b,
        "Sub": lambda op, a, b: a - b, "Mul": lambda op, a, b: a * b, "RealDiv": lambda op, a, b: a / b,
        "Rsqrt": lambda op, x: lax.rsqrt(x), "Relu": lambda op, x: jax.nn.relu(x),
        "Relu6": lambda op, x: jnp.clip(x, 0, 6), "Softmax": lambda op, x: jax.nn.softmax(x, axis=-1),
        "BiasAdd": lambda op, x, b: x + b, "MatMul": _matmul, "Mean": _mean,
        "Conv2D": _conv, "DepthwiseConv2dNative": _depthwise,
        "AvgPool": lambda op, x: _pool(op, x, "avg"), "MaxPool": lambda op, x: _pool(op, x, "max"),
        "Pad": lambda op, x, pads: jnp.pad(x, [tuple(int(v) for v in row) for row in np.asarray(pads)]),
        "ConcatV2": lambda op, *args: jnp.concatenate(args[:-1], axis=int(args[-1])),
        "Reshape": lambda op, x, shape: jnp.reshape(x, tuple(int(v) for v in np.asarray(shape))),
        "Squeeze": lambda op, x: jnp.squeeze(x, axis=tuple(op.get_attr("squeeze_dims")) or None),
    }


# Inputs that are shapes, axes or paddings: kept as NumPy values (static under jit).
_STATIC_INPUTS = {"Mean": {1}, "Pad": {1}, "Reshape": {1}, "ConcatV2": {-1}}


def translate(graph, output: str, inputs: list[str]) -> Callable[..., Any]:
    """``fn(*values)``: the value of tensor ``output`` given values of the tensors ``inputs``
    (placeholders or constants: a constant given as an input is a parameter)."""
    from gradreg.model.traversal import needed_ops, topological_order
    rules = _rules()
    target = graph.get_tensor_by_name(output)
    given = [graph.get_tensor_by_name(name) for name in inputs]
    order = topological_order(needed_ops([target.op], set()))
    consts = {op.outputs[0]: np.asarray(op.get_attr("value")) for op in order
              if op.type == "Const" and op.outputs[0] not in given}
    for op in order:
        if op.type not in rules and op.type not in ("Const", "Placeholder", "NoOp"):
            raise NotImplementedError(f"graph_to_jax: no rule for {op.type} ({op.name})")

    def fn(*values):
        env: dict[Any, Any] = dict(consts)
        env.update(zip(given, values))
        for op in order:
            if op.type in ("Const", "Placeholder", "NoOp") or op.outputs[0] in env:
                continue
            static = _STATIC_INPUTS.get(op.type, set())
            args = [consts[t] if (i in static or i - len(op.inputs) in static) else env[t]
                    for i, t in enumerate(op.inputs)]
            env[op.outputs[0]] = rules[op.type](op, *args)
        return env[target]
    return fn


def cnn_step(name: str, warm: bool = True):
    """bench/foreign_cnn.py's call in JAX: output and gradients w.r.t. input and weights, one jit."""
    import jax
    from foreign_cnn import _check
    from foreign_graphs import feeds, graph_path, manifest

    import gradreg as gr
    entry = manifest()[name]
    graph = gr.load_graph(str(graph_path(name)))
    fn = translate(graph, entry["ys"][0], entry["xs"])
    if graph.get_tensor_by_name("x:0").dtype == gr.float64:
        jax.config.update("jax_enable_x64", True)    # else JAX computes the float64 ResNet in float32
    weights = [jax.device_put(np.asarray(graph.get_tensor_by_name(t).op.get_attr("value"))) for t in entry["xs"][1:]]
    given = feeds(name, grad_ys=True)
    x, cotangent = jax.device_put(given["x:0"]), jax.device_put(given["grad_ys_0:0"])

    @jax.jit
    def step(x, weights, cotangent):
        y, pullback = jax.vjp(lambda x, *w: fn(x, *w), x, *weights)
        return y, pullback(cotangent)

    def run():
        return jax.block_until_ready(step(x, weights, cotangent))
    if warm:
        y, grads = run()
        _check(name, entry["fetches"] + entry["tf_grad_tensors"], [y, *grads])
    return run, {"jax": jax.__version__}


if __name__ == "__main__":
    for cnn in sys.argv[1:] or ["mobilenet_v2_64", "densenet_slim_32", "resnet_slim_f64_32"]:
        cnn_step(cnn)
        print(f"{cnn}: JAX's values match TensorFlow's")
