"""The numba backend's in-place optimizer apply kernels agree with the NumPy kernels."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import ExecutionError
from gradreg_plugins.training import numba_kernels

pytest.importorskip("numba")

# op type -> (slot variables after var, hyperparameters before/after grad, attrs)
RULES = {
    "ApplyGradientDescent": ([], [("alpha", 0.1)], [], {}),
    "ApplyMomentum": (["accum"], [("lr", 0.05)], [("momentum", 0.9)], {"use_nesterov": False}),
    "ApplyAdam": (["m", "v"], [("beta1_power", 0.9), ("beta2_power", 0.999), ("lr", 0.01), ("beta1", 0.9),
                               ("beta2", 0.999), ("epsilon", 1e-7)], [], {"use_nesterov": False}),
    "ApplyAdagrad": (["accum"], [("lr", 0.1)], [], {"update_slots": True}),
    "ApplyRMSProp": (["ms", "mom"], [("lr", 0.01), ("rho", 0.9), ("momentum", 0.5), ("epsilon", 1e-6)], [], {}),
    "ApplyCenteredRMSProp": (["mg", "ms", "mom"], [("lr", 0.01), ("rho", 0.9), ("momentum", 0.5),
                                                   ("epsilon", 1e-6)], [], {}),
}
CASES = [(rule, attrs) for rule, (_, _, _, attrs) in RULES.items()]
CASES += [("ApplyMomentum", {"use_nesterov": True}), ("ApplyAdam", {"use_nesterov": True}),
          ("ApplyAdagrad", {"update_slots": False})]


def build(op_type, attrs, dtype, resource, shape=(7, 5)):
    rng = np.random.default_rng(0)
    slots, before, after, _ = RULES[op_type.replace("Resource", "")]
    graph = gr.Graph()
    with graph.as_default():
        t = gr.as_dtype(dtype)
        variables = [gr.Variable(rng.standard_normal(shape).astype(dtype), name="var", use_resource=resource)]
        variables += [gr.Variable(np.abs(rng.standard_normal(shape)).astype(dtype) + 0.5, name=s,
                                  use_resource=resource) for s in slots]
        grad = gr.placeholder(t, None, name="grad")
        scalars = [gr.constant(np.asarray(v, dtype), name=n) for n, v in before]
        scalars_after = [gr.constant(np.asarray(v, dtype), name=n) for n, v in after]
        handles = [v.handle for v in variables]
        name = ("Resource" if resource else "") + op_type
        train = gr.apply_op(name, *handles, *scalars, grad, *scalars_after, **attrs)
        init = gr.global_variables_initializer()
    return graph, variables, grad, train, init


def steps(graph, variables, grad, train, init, backend, grads):
    session = gr.Session(graph, backend=backend)
    session.run(init)
    for g in grads:
        session.run(train.op if isinstance(train, gr.Tensor) else train, {grad: g})
    return session.run(variables)


@pytest.mark.parametrize("resource", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op_type,attrs", CASES)
def test_apply_kernels_agree(op_type, attrs, dtype, resource):
    graph, variables, grad, train, init = build(op_type, attrs, dtype, resource)
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal((7, 5)).astype(dtype) for _ in range(3)]
    fused = steps(graph, variables, grad, train, init, "numba", grads)
    loop_name = numba_kernels._RULES[op_type][0]
    loop = numba_kernels._loop(np.dtype(dtype), loop_name)
    if hasattr(loop, "signatures"):     # numba's (native loops, gradreg.native, have none)
        assert loop.signatures          # the compiled loop ran
    reference = steps(graph, variables, grad, train, init, "numpy", grads)
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
    for got, want in zip(fused, reference):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **tolerance)


def test_updates_in_place():
    graph, variables, grad, train, init = build("ApplyAdam", {}, np.float32, True)
    session = gr.Session(graph, backend="numba")
    session.run(init)
    state = session.resources["variables"][variables[0].op.name]
    address = state.value.ctypes.data   # no reference kept: one would make the update copy
    session.run(train, {grad: np.ones((7, 5), np.float32)})
    assert state.value.ctypes.data == address


def test_bad_gradient_shape_goes_to_the_numpy_kernel():
    graph, variables, grad, train, init = build("ApplyRMSProp", {}, np.float32, True)
    session = gr.Session(graph, backend="numba")
    session.run(init)
    with pytest.raises(ExecutionError, match="same shape"):
        session.run(train, {grad: np.ones((7, 4), np.float32)})


def test_a_constant_gradient_takes_the_loop_built_in_the_background(monkeypatch):
    """A Const's gradient reaches the update read-only; the loop gets a writable copy, so no
    call compiles a read-only variant in the caller's thread. Values as the NumPy backend's."""
    from numba import types
    monkeypatch.setenv("GRADREG_JIT", "eager")
    rng = np.random.default_rng(4)
    start, gradient = rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal((7, 5)).astype(np.float32)
    results = {}
    for backend in ("numpy", "numba"):
        graph = gr.Graph()
        with graph.as_default():
            var, m, v = (gr.Variable(value, name=name, use_resource=True)
                         for name, value in (("var", start), ("m", np.zeros_like(start)), ("v", np.zeros_like(start))))
            hyper = [gr.constant(np.float32(x)) for x in (0.9, 0.999, 0.01, 0.9, 0.999, 1e-7)]
            train = gr.apply_op("ResourceApplyAdam", var.handle, m.handle, v.handle, *hyper,
                                gr.constant(gradient), use_nesterov=False)
            init = gr.global_variables_initializer()
        session = gr.Session(graph, backend=backend)
        session.run(init)
        for _ in range(3):
            session.run(train)
        results[backend] = session.resources["variables"][var.op.name].value.copy()
    np.testing.assert_allclose(results["numba"], results["numpy"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(results["numba"], start)
    adam = numba_kernels._loop(np.dtype(np.float32), "adam")
    if not hasattr(adam, "signatures"):
        return      # native loops (gradreg.backends.native): one machine code for any array, read-only or not
    assert adam.signatures
    assert all(t.mutable for sig in adam.signatures for t in sig if isinstance(t, types.Array))
