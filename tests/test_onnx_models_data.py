"""The PyTorch-exported ONNX reference data is complete and means what its README says.

These check the committed data, not gradreg: every case has its arrays under the right names, the
models pass onnx's checker, onnxruntime reproduces torch's outputs, and the stored gradients are the
gradients of the ONNX graph (central differences through onnxruntime along a random direction).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
from onnx_models import ALL_CASES, ROOT, assert_close, load_case, scaled_error

EXPECTED_CASES = {
    "resnet_opset18", "resnet_opset13", "resnet_opset7", "mobilenetv2_opset18", "mobilenetv2_opset13",
    "transformer_opset18", "transformer_opset17", "lstm_opset18", "gru_opset13", "mlp_gelu_opset18",
    "mlp_gelu_opset20", "upsample_opset18", "dynamic_batch_opset18", "external_data_opset18",
    "cond_opset18", "loop_opset13", "batchnorm_train_opset15", "unet_opset17", "unet_dynamic_opset18",
}


def test_every_case_is_present_and_the_directory_stays_under_15_mb():
    assert set(ALL_CASES) == EXPECTED_CASES
    size = sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file())
    assert size <= 15 * 2**20


@pytest.mark.parametrize("name", ALL_CASES)
def test_arrays_are_keyed_by_onnx_names_with_matching_shapes(name):
    case = load_case(name)
    assert list(case.feeds()) == list(case.meta["inputs"])
    for key, dims in case.meta["inputs"].items():
        assert [d if isinstance(d, int) else case.inputs[key].shape[i] for i, d in enumerate(dims)] == \
            list(case.inputs[key].shape)
    outputs, cotangents = case.outputs(), case.cotangents()
    assert list(outputs) == case.meta["outputs"] == list(cotangents) == list(case.ort_outputs())
    assert all(outputs[k].shape == cotangents[k].shape for k in outputs)
    gradients = case.gradients()
    assert list(gradients) == case.meta["xs"]
    assert set(case.parameters.values()) | set(case.meta["inputs"]) == set(gradients)
    for key in case.meta["inputs"]:
        assert gradients[key].shape == case.inputs[key].shape


@pytest.mark.parametrize("name", ALL_CASES)
def test_models_pass_the_checker_and_hold_the_parameters_under_their_names(name):
    onnx = pytest.importorskip("onnx")
    case = load_case(name)
    onnx.checker.check_model(str(case.model_path), full_check=True)
    model = onnx.load(str(case.model_path))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert model.opset_import[0].version == case.meta["opset"]
    assert [o.name for o in model.graph.output] == case.meta["outputs"]
    for initializer in case.parameters.values():
        assert inits[initializer].shape == case.gradients()[initializer].shape


def test_the_exported_graphs_hold_the_ops_they_are_meant_to_exercise():
    onnx = pytest.importorskip("onnx")

    def op_types(graph):
        for node in graph.node:
            yield node.op_type
            for attr in node.attribute:
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    yield from op_types(sub)
    wanted = {"lstm_opset18": "LSTM", "gru_opset13": "GRU", "cond_opset18": "If", "loop_opset13": "Loop",
              "upsample_opset18": "Resize", "mlp_gelu_opset20": "Gelu", "unet_opset17": "Resize",
              "unet_dynamic_opset18": "Resize"}
    for name, op_type in wanted.items():
        assert op_type in set(op_types(onnx.load(str(load_case(name).model_path)).graph)), name
    model = onnx.load(str(load_case("dynamic_batch_opset18").model_path))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    raw = onnx.load(str(load_case("external_data_opset18").model_path), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in raw.graph.initializer)


def _session(ort, model_bytes):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", ALL_CASES)
def test_onnxruntime_reproduces_torchs_outputs(name):
    ort = pytest.importorskip("onnxruntime")
    case = load_case(name)
    outputs = _session(ort, str(case.model_path)).run(case.meta["outputs"], case.feeds())
    for key, actual in zip(case.meta["outputs"], outputs):
        assert_close(actual, case.outputs()[key], f"{name}: {key}")
        assert scaled_error(actual, case.ort_outputs()[key]) < 1e-6


def test_onnxruntime_reproduces_torchs_outputs_at_the_second_input_shape():
    """unet_dynamic_opset18 stores torch's values at a second input shape ("other:" keys) as well: the
    graph's symbolic batch, height and width take it, and onnxruntime gives torch's output there."""
    ort = pytest.importorskip("onnxruntime")
    case = load_case("unet_dynamic_opset18")
    feeds = {k: case.expected[f"other:in:{k}"] for k in case.meta["inputs"]}
    assert {k: list(v.shape) for k, v in feeds.items()} == case.meta["other_inputs"] != \
        {k: list(v.shape) for k, v in case.feeds().items()}
    (actual,) = _session(ort, str(case.model_path)).run(["y"], feeds)
    assert actual.shape == case.expected["other:dy:y"].shape
    assert_close(actual, case.expected["other:y:y"], "unet_dynamic_opset18 at the second shape")
    for x in case.meta["xs"]:
        expected = case.expected[f"other:dx:{x}"]
        assert expected.shape == (feeds[x].shape if x in feeds else case.gradients()[x].shape)


def _overridable(onnx, model, names):
    """A copy of model whose named initializers are graph inputs too, so a feed can replace them."""
    variant = copy.deepcopy(model)
    variant.ir_version = max(variant.ir_version, 4)
    listed = {i.name for i in variant.graph.input}
    for t in variant.graph.initializer:
        if t.name in names and t.name not in listed:
            variant.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return variant


@pytest.mark.parametrize("name", ALL_CASES)
def test_stored_gradients_are_directional_derivatives_of_the_onnx_graph(name):
    """<gradient, d> equals (L(v + eps d) - L(v - eps d)) / 2 eps through onnxruntime, L = sum(y * dy),
    for a random d over every input and parameter at once.

    The error is measured against sum |gradient * d| (the sum can cancel). In float32, with ReLU and
    max-pool kinks nearby, eps = 3e-4 leaves at most 1.2e-4 on these cases; a gradient stored under the
    wrong name or a parameter the exporter changed (e.g. BatchNorm folded into Conv) is off by O(1).
    make_reference.py checks each parameter on its own before writing."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    case = load_case(name)
    model = onnx.load(str(case.model_path))
    session = _session(ort, _overridable(onnx, model, set(case.parameters.values())).SerializeToString())
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    point = {k: (case.inputs[k] if k in case.inputs else inits[k]).astype(np.float64) for k in case.meta["xs"]}
    rng = np.random.default_rng(0)
    direction = {k: rng.standard_normal(v.shape) * (np.sqrt(np.mean(v ** 2)) + 0.01) for k, v in point.items()}
    cotangents = case.cotangents()

    def loss(step):
        feeds = {k: (v + step * direction[k]).astype(np.float32) for k, v in point.items()}
        outputs = session.run(case.meta["outputs"], feeds)
        return sum(float(np.sum(o.astype(np.float64) * cotangents[k]))
                   for k, o in zip(case.meta["outputs"], outputs))
    eps = 3e-4
    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    products = {k: g.astype(np.float64) * direction[k] for k, g in case.gradients().items()}
    analytic = sum(float(p.sum()) for p in products.values())
    scale = sum(float(np.abs(p).sum()) for p in products.values())
    assert abs(numeric - analytic) <= 1e-3 * scale, (numeric, analytic, scale)
