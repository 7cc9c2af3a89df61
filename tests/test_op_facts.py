"""Facts about ops are declared by the families that own them, and the core asks the registry:
linearity and iteration sums (loop gradients), library-function calls, rule origins in
errors, the one list of execution backends (a third backend plugs in as a plugin)."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import GradientError, GradregError
from gradreg.registry import Backend, PluginSource, get_registry
from gradreg.registry.hookspecs import hookimpl
from gradreg.runtime.plan import PlanCompiler


def test_the_families_declare_which_ops_are_linear():
    registry = get_registry()
    linear = {op_type: registry.ops.lookup(op_type).plugin for op_type in registry.ops
              if registry.op_definition(op_type).linear}
    assert linear == {
        "BatchToSpace": "nn",
        "BatchToSpaceND": "nn",
        "BiasAddGrad": "nn",
        "CropAndResizeGradBoxes": "image",
        "CropAndResizeGradImage": "image",
        "DepthToSpace": "nn",
        "ExtractImagePatches": "nn",
        "ExtractVolumePatches": "nn",
        "FakeQuantWithMinMaxArgsGradient": "nn",
        "Identity": "array",
        "Neg": "math",
        "QuantizeAndDequantizeV4Grad": "nn",
        "Reshape": "array",
        "ResizeBicubicGrad": "image",
        "ResizeBilinearGrad": "image",
        "ResizeNearestNeighborGrad": "image",
        "ScaleAndTranslateGrad": "image",
        "SpaceToBatch": "nn",
        "SpaceToBatchND": "nn",
        "SpaceToDepth": "nn",
        "Sum": "math",
        "Transpose": "array",
    }


def test_matmuls_iteration_sum_rule_comes_from_the_math_family():
    found = get_registry().iteration_sums.lookup("MatMul")
    assert found is not None and found.plugin == "math"


def test_matmuls_iteration_stack_rule_comes_from_the_math_family():
    found = get_registry().iteration_stacks.lookup("MatMul")
    assert found is not None and found.plugin == "math"
    assert get_registry().iteration_stack("Tanh") is None


def test_an_rnn_weight_gradient_is_one_matmul_after_the_loop(graph):
    x = gr.placeholder(gr.float64, [5, 2, 3], name="x")
    w = gr.constant(np.linspace(-1, 1, 12).reshape(3, 4), name="w")
    _, h = gr.while_loop(lambda i, h: i < 5, lambda i, h: (i + 1, gr.tanh(gr.matmul(x[i], w)) + h),
                         [0, gr.zeros([2, 4], gr.float64)])
    (dw,) = gr.gradients(gr.reduce_sum(h * h), [w])
    # The contributions x_t^T dz_t are summed by the iteration-sum rule: a MatMul outside every loop.
    assert dw.op.type == "MatMul" and dw.op.get_attr("transpose_a")
    xs = np.random.default_rng(0).normal(size=(5, 2, 3))
    got = gr.Session(graph).run(dw, {x: xs})
    w_value = np.linspace(-1, 1, 12).reshape(3, 4)
    h_value, pre = np.zeros((2, 4)), []
    for t in range(5):
        z = xs[t] @ w_value
        pre.append(z)
        h_value = np.tanh(z) + h_value
    dh, expected = 2 * h_value, np.zeros((3, 4))
    for t in reversed(range(5)):      # dh flows unchanged through "+ h" to every step
        expected += xs[t].T @ (dh * (1 - np.tanh(pre[t]) ** 2))
    np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_library_function_calls_are_handled_by_the_function_call_family():
    found = get_registry().function_call()
    assert found is not None and found.plugin == "function_call"
    assert found.value.kernel is not None and found.value.gradient is not None
    for table in (get_registry().gradients, get_registry().kernels("numpy")):
        assert not [key for key in table if key.startswith("<")]


def test_an_error_in_an_overriding_rule_names_its_registration_not_the_op_types_plugin(graph):
    @gr.RegisterGradient("TestOpFactsBrokenSquare")
    def _broken(op, grad):
        raise ValueError("broken on purpose")

    x = gr.placeholder(gr.float32, [2], name="x")
    with graph.gradient_override_map({"Square": "TestOpFactsBrokenSquare"}):
        y = gr.square(x)
    with pytest.raises(GradientError) as raised:
        gr.gradients(y, [x])
    message = str(raised.value)
    assert "python code in module 'test_op_facts'" in message and "TestOpFactsBrokenSquare" in message
    assert "plugin 'math'" not in message


def test_an_error_in_a_custom_gradient_names_the_custom_gradient(graph):
    @gr.custom_gradient
    def twice(x):
        def grad(dy):
            raise ValueError("broken on purpose")
        return x * 2.0, grad

    x = gr.placeholder(gr.float32, [2], name="x")
    with pytest.raises(GradientError, match=r"\(custom gradient 'CustomGradient-\d+'\)"):
        gr.gradients(twice(x), [x])


def test_the_registry_owns_the_one_list_of_backends():
    registry = get_registry()
    assert {"numpy", "numba"} <= set(registry.backend_names())
    assert registry.backends.lookup("numpy").plugin == "numpy_backend"
    with pytest.raises(GradregError, match="unknown backend 'cupy': the installed backends are .*'numpy'"):
        gr.Session(gr.Graph(), backend="cupy")


class _CountingBackend:
    """A third backend from a plugin: the NumPy plan compiler, counting what it compiles."""

    def __init__(self):
        self.compiled = []

    def create_executor(self, context, check_outputs=False):
        inner = PlanCompiler(context, ("numpy",), check_outputs=check_outputs)
        outer = self

        class Counting:
            def compile(self, fetches, feeds):
                outer.compiled.append([f.name for f in fetches])
                return inner.compile(fetches, feeds)
        return Counting()

    @hookimpl
    def gradreg_backends(self):
        return [Backend("test_counting", self.create_executor, priority=-1)]


@pytest.fixture
def counting_backend():
    plugin = _CountingBackend()
    registry = get_registry()
    registry.add_plugin(PluginSource("test_counting_backend", load=lambda: plugin))
    yield plugin
    registry.remove_plugin("test_counting_backend")
    assert "test_counting" not in registry.backend_names()


def test_a_third_backend_plugs_in_through_the_registry(graph, counting_backend):
    x = gr.placeholder(gr.float32, [3], name="x")
    y = gr.reduce_sum(gr.square(x), name="y")
    (dx,) = gr.gradients(y, [x])
    session = gr.Session(graph, backend="test_counting")
    got = session.run([y, dx], {x: np.array([1, 2, 3], np.float32)})
    assert got[0] == 14.0 and got[1].tolist() == [2.0, 4.0, 6.0]
    assert counting_backend.compiled == [["y:0", dx.name]]
    assert get_registry().preferred_backend() != "test_counting"   # priority -1: never the default
