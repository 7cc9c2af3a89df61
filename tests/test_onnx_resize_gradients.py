"""Resize whose scales or sizes are computed (issue 28): a U-Net exported by PyTorch, whose Resizes
take ``nn.Upsample``'s scales and ``F.interpolate(size=skip.shape[2:])``'s sizes from Shape, Slice and
Concat ops (tests/data/onnx_models unet_opset17, unet_dynamic_opset18; torch's gradients stored).

With static shapes those ops are folded when the gradient is built and the interpolation weights are
constants; with symbolic batch, height and width the weights are computed at run time, by the Resize
itself applied to an identity matrix, so one gradient graph serves every input size. Those run-time
weights are also checked in every interpolation mode against central differences."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx.inliner import inline_local_functions  # noqa: E402
from onnx_models import load_case  # noqa: E402
from test_onnx_models import assert_grad_close  # noqa: E402

import gradreg as gr  # noqa: E402
from gradreg_plugins.onnx.format import graph_to_model  # noqa: E402


def gradient_graph(case, shape=None):
    """The case's graph and the gradients of sum(y * dy) w.r.t. its xs, dy fed as 'dy'."""
    graph = gr.load_graph(str(case.model_path))
    y = graph.get_tensor(case.meta["outputs"][0])
    with graph.as_default():
        dy = gr.placeholder(gr.float32, shape=shape or y.shape, name="dy")
    grads = gr.gradients([y], [graph.get_tensor(n) for n in case.meta["xs"]], grad_ys=[dy])
    return graph, dy, grads


def op_counts(model) -> dict[str, int]:
    """The model's ops, each gradient rule's (a model-local function's call) counted as its body's."""
    counts: dict[str, int] = {}
    for node in inline_local_functions(model).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def test_sizes_computed_from_static_shapes_are_folded_into_constant_interpolation_weights():
    case = load_case("unet_opset17")
    graph, dy, grads = gradient_graph(case)
    values = gr.Session(graph).run(grads, {**case.feeds(), dy: case.cotangents()["y"]})
    for name, value in zip(case.meta["xs"], values):
        assert_grad_close(value, case.gradients()[name], f"d/d{name}")
    counts = op_counts(graph_to_model(graph, {f"d_{i}": g for i, g in enumerate(grads)}))
    assert counts["Resize"] == 2 and "EyeLike" not in counts    # the forward's two; no weights computed


def other_size(case):
    """The case's second input shape, with torch's cotangent and gradients for it."""
    expected = case.expected
    feeds = {k: expected[f"other:in:{k}"] for k in case.meta["inputs"]}
    return feeds, expected["other:dy:y"], {x: expected[f"other:dx:{x}"] for x in case.meta["xs"]}


def test_sizes_read_from_a_dynamic_inputs_shape_give_interpolation_weights_at_run_time():
    case = load_case("unet_dynamic_opset18")
    graph, dy, grads = gradient_graph(case, shape=[None, 2, None, None])
    assert [None if d is None else int(d) for d in grads[0].shape.dims] == [None, 3, None, None]
    feeds, cotangent, gradients = other_size(case)
    assert feeds["x"].shape != case.feeds()["x"].shape
    values = gr.Session(graph).run(grads, {**feeds, dy: cotangent})
    for name, value in zip(case.meta["xs"], values):
        assert_grad_close(value, gradients[name], f"d/d{name} at {feeds['x'].shape}")


def test_onnxruntime_runs_the_run_time_weights_gradient_model_at_two_input_sizes():
    ort = pytest.importorskip("onnxruntime")
    case = load_case("unet_dynamic_opset18")
    graph, dy, grads = gradient_graph(case, shape=[None, 2, None, None])
    model = graph_to_model(graph, {f"d_{i}": g for i, g in enumerate(grads)})     # the full checker ran
    # each Resize's weights along height and width only: its scales and sizes leave batch and channels
    assert op_counts(model)["EyeLike"] == 4
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds, cotangent, gradients = other_size(case)
    for x, dy_value, expected in [(case.feeds()["x"], case.cotangents()["y"], case.gradients()),
                                  (feeds["x"], cotangent, gradients)]:
        values = session.run(None, {"x": x, "dy": dy_value})
        for name, value in zip(case.meta["xs"], values):
            assert_grad_close(value, expected[name], f"onnxruntime d/d{name} at {x.shape}")
    assert np.shape(values[0]) == feeds["x"].shape


# The run-time weights in every interpolation mode: scales, sizes or roi fed as placeholders (known only
# at run time), x of static shape; gradreg's Jacobian against central differences in float64.
# name -> (x shape, resize input fed at run time ("scales", "sizes" or "roi"), its value, attributes)
RUN_TIME = {
    "linear scales": ((1, 2, 2, 3), "scales", [1, 1, 2.0, 1.5], {}),
    "nearest floor asymmetric": ((1, 2, 3), "scales", [1, 1, 2.5],
                                 {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                  "nearest_mode": "floor"}),
    "cubic exclude_outside": ((1, 1, 3, 5), "scales", [1, 1, 1.7, 0.6],
                              {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
    "linear antialias down": ((1, 2, 6), "scales", [1, 1, 0.5], {"mode": "linear", "antialias": 1}),
    "align_corners sizes axes": ((1, 1, 3, 3), "sizes", [5, 2],
                                 {"axes": [3, 2], "mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    "tf_crop_and_resize extrapolation": ((2, 3), "roi", [0.2, 0.9],
                                         {"axes": [1], "mode": "linear", "extrapolation_value": 3.0,
                                          "coordinate_transformation_mode": "tf_crop_and_resize"}),
}


@pytest.mark.parametrize("name", list(RUN_TIME))
def test_interpolation_weights_computed_at_run_time_match_central_differences(name):
    from gradreg.testing import compute_gradient_error
    from gradreg_plugins.onnx.build import onnx_op
    shape, fed, value, attrs = RUN_TIME[name]
    value = np.array(value, np.int64 if fed == "sizes" else np.float32)
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float64, shape, name="x")
        given = gr.placeholder(gr.int64 if fed == "sizes" else gr.float32, value.shape, name=fed)
        inputs = {"roi": None, "scales": None, "sizes": None, fed: given}
        if fed == "roi":
            inputs["sizes"] = np.array([4], np.int64)
            inputs["roi"] = onnx_op("Cast", given, to=np.float64)
        y = onnx_op("Resize", x, inputs["roi"], inputs["scales"], inputs["sizes"], **attrs)
        (dx,) = gr.gradients(y, [x])
    model = graph_to_model(g, {"dx": dx})
    assert "EyeLike" in op_counts(model)      # the weights are not constants: computed from the fed input
    x_value = np.random.default_rng(0).uniform(-1, 1, shape)
    y_shape = list(np.shape(gr.Session(g).run(y, {x: x_value, given: value})))
    error = compute_gradient_error(x, list(shape), y, y_shape, x_init_value=x_value, extra_feed_dict={given: value},
                                   delta=1e-6)
    assert error < 1e-6, error
