"""``gradreg grad --grad-ys``: weighting the ys by values, for every format (issue 32, point 2).
The referees: TensorFlow's tf.GradientTape on a Keras softmax SavedModel (tests/data/keras_softmax,
written by its make_reference.py), torch's autograd on an ONNX file (tests/data/onnx_models), and
the arithmetic of a small GraphDef."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from onnx_models import load_case

import gradreg as gr
from gradreg import cli

DATA = pathlib.Path(__file__).resolve().parent / "data"
KERAS = DATA / "keras_softmax"


def status(argv) -> int:
    """The exit status of ``gradreg ARGV`` (usage errors exit through argparse)."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return int(exc.code)


def grad_json(argv, capsys):
    code = cli.main(["grad", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    return document["gradients"], {v["name"]: np.asarray(v["values"]) for v in document["values"]}


@pytest.fixture
def keras_inputs(tmp_path):
    expected = dict(np.load(KERAS / "expected.npz"))
    np.save(tmp_path / "features.npy", expected["features"])
    return expected, tmp_path


def test_the_gradient_of_one_class_of_a_keras_softmax_is_tensorflows(keras_inputs, capsys):
    expected, tmp = keras_inputs
    np.save(tmp / "onehot.npy", np.array([0, 0, 1, 0], np.float32))     # class 2, broadcast over the batch
    gradients, values = grad_json([str(KERAS / "model"), "--ys", "output_0", "--xs", "features,probs/kernel",
                                   "--feed", f"features={tmp / 'features.npy'}",
                                   "--grad-ys", f"output_0={tmp / 'onehot.npy'}"], capsys)
    assert set(gradients) == {"features", "probs/kernel"}
    np.testing.assert_allclose(values["output_0"], expected["probs"], rtol=1e-5)
    np.testing.assert_allclose(values["features"], expected["grad/onehot2/features"], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(values["probs/kernel"], expected["grad/onehot2/kernel"], rtol=1e-4, atol=1e-7)
    assert np.abs(values["features"]).max() > 1e-2     # not the ~0 of the unweighted sum of probabilities


def test_a_weighted_output_from_an_npz_keyed_by_output_name(keras_inputs, capsys):
    expected, tmp = keras_inputs
    np.savez(tmp / "weights.npz", output_0=expected["r"])
    _, values = grad_json([str(KERAS / "model"), "--ys", "output_0", "--xs", "features", "--feed",
                           f"features={tmp / 'features.npy'}", "--grad-ys", str(tmp / "weights.npz")], capsys)
    np.testing.assert_allclose(values["features"], expected["grad/r/features"], rtol=1e-4, atol=1e-7)


def test_unweighted_softmax_gradients_are_zero_and_the_command_says_how_to_weight(keras_inputs, capsys):
    expected, tmp = keras_inputs
    code = cli.main(["grad", str(KERAS / "model"), "--ys", "output_0", "--xs", "features", "--feed",
                     f"features={tmp / 'features.npy'}"])
    out, err = capsys.readouterr()
    assert code == 0
    assert np.abs(expected["grad/ones/features"]).max() < 1e-6      # TensorFlow's: zero up to rounding
    assert "every gradient is zero" in err and "--grad-ys output_0=" in err


def test_a_savedmodel_takes_weights_not_tensor_names(keras_inputs, capsys):
    _, tmp = keras_inputs
    code = status(["grad", str(KERAS / "model"), "--ys", "output_0", "--xs", "features", "--feed",
                   f"features={tmp / 'features.npy'}", "--grad-ys", "some_tensor"])
    assert code == 2 and "weighted by values" in capsys.readouterr().err


def test_an_onnx_output_weighted_by_torchs_cotangent_gives_torchs_gradients(tmp_path, capsys):
    case = load_case("mlp_gelu_opset18")
    np.save(tmp_path / "dy.npy", case.cotangents()["y"])
    gradients, values = grad_json([str(case.model_path), "--ys", "y", "--xs", "x,fc1.weight",
                                   "--feed", str(case.path / "inputs.npz"),
                                   "--grad-ys", f"y={tmp_path / 'dy.npy'}"], capsys)
    assert set(gradients) == {"x", "fc1.weight"}
    np.testing.assert_allclose(values[gradients["x"]], case.gradients()["x"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values[gradients["fc1.weight"]], case.gradients()["fc1.weight"], rtol=1e-4, atol=1e-5)


def _scaled_graph(path: pathlib.Path) -> None:
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None, 3], name="x")
        gr.multiply(x, x, name="y")                # dy/dx = 2x, elementwise
        gr.reduce_sum(x, name="total")
    gr.save_graph(graph, str(path))


def test_graph_file_weights_as_a_scalar_a_row_and_a_tensor_name(tmp_path, capsys):
    path = tmp_path / "g.pb"
    _scaled_graph(path)
    feed = ["--feed", "x=[[1,2,3],[4,5,6]]"]
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    gradients, values = grad_json([str(path), "--ys", "y,total", "--xs", "x", *feed,
                                   "--grad-ys", "y=0.5", "--grad-ys", "total:0=10"], capsys)
    np.testing.assert_allclose(values[gradients["x:0"]], 0.5 * 2 * x + 10)
    gradients, values = grad_json([str(path), "--ys", "y", "--xs", "x", *feed, "--grad-ys", "y=[1,0,-1]"], capsys)
    np.testing.assert_allclose(values[gradients["x:0"]], 2 * x * [1, 0, -1])      # a row broadcast over the batch
    gradients, values = grad_json([str(path), "--ys", "y", "--xs", "x", *feed, "--grad-ys", "x"], capsys)
    np.testing.assert_allclose(values[gradients["x:0"]], 2 * x * x)                # the tensor x weights y


@pytest.mark.parametrize(("weights", "expected", "message"), [
    (["z=1"], 2, "names none of the ys"),
    (["y=[1,2]"], 1, "does not broadcast"),
    (["y=1", "x"], 2, "not both"),
    (["y=abc"], 1, "neither a file nor a value"),
])
def test_bad_weights_are_one_line_errors(tmp_path, capsys, weights, expected, message):
    path = tmp_path / "g.pb"
    _scaled_graph(path)
    argv = ["grad", str(path), "--ys", "y", "--xs", "x", "--feed", "x=[[1,2,3]]"]
    for w in weights:
        argv += ["--grad-ys", w]
    code = status(argv)
    err = capsys.readouterr().err
    assert code == expected and message in err and len(err.strip().splitlines()) == 1
