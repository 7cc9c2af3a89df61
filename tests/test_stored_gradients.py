"""Custom gradients TensorFlow saved with a SavedModel (registered_gradients; gradreg.autodiff.
stored_gradients, gradreg.formats.saved_gradients), against TensorFlow's values for the loaded
model (tests/data/tf_models/saved_models, made by saved_model_cases.py):

* custom_gradients: a tf.Module whose custom gradient is not the derivative (a damped, clipped
  pass-through capturing an intermediate tensor) next to tf.nn.silu's: only the stored gradient
  function gives TensorFlow's numbers;
* keras_efficientnet: keras.applications' EfficientNet (swish) exported by Keras.

Without any flag, through the API, the command line, and a frozen graph. (The gradients w.r.t.
every variable are in tests/test_saved_model.py, which runs these cases with the others.)
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from tf_models import assert_close, load_saved_model_case

import gradreg as gr
from gradreg.cli import main as cli_main
from gradreg.errors import GradregError

# (case, signature, output, input)
CASES = [("custom_gradients", "serving_default", "y", "x"), ("keras_efficientnet", "serving_default", "output_0",
                                                             "image")]


def _gradient(graph, output, x, feeds, session=None, **options):
    with graph.as_default():
        (grad,) = gr.gradients(graph.get_tensor(output), [graph.get_tensor(x)], **options)
    return (session or gr.Session(graph)).run(grad, feeds)


def test_the_stored_function_is_used_not_the_forward_ops():
    case = load_saved_model_case("custom_gradients")
    model = gr.load_saved_model(str(case.model_path))
    signature = model.signatures["serving_default"]
    feeds = {signature.inputs["x"]: case.signature_inputs("serving_default")["x"]}
    expected = case.expected["din_ones:serving_default/y/x"]
    stored = _gradient(model.graph, signature.outputs["y"].name, signature.inputs["x"].name, feeds, model.session)
    assert_close(stored, expected, "stored", case.meta["tolerance"])
    forward = _gradient(model.graph, signature.outputs["y"].name, signature.inputs["x"].name, feeds, model.session,
                        custom_gradient="forward")
    assert np.abs(forward - expected).max() > 0.1 * np.abs(expected).max()   # the derivative, not TF's


@pytest.mark.parametrize("name,signature,output,x", CASES)
def test_the_command_line_needs_no_flag(name, signature, output, x, tmp_path, capsys):
    case = load_saved_model_case(name)
    np.savez(tmp_path / "feed.npz", **case.signature_inputs(signature))
    out = tmp_path / "grads.npz"
    assert cli_main(["grad", str(case.model_path), "--signature", signature, "--ys", output, "--xs", x,
                     "--feed", str(tmp_path / "feed.npz"), "-o", str(out)]) == 0
    with np.load(out) as saved:
        assert_close(saved[x], case.expected[f"din_ones:{signature}/{output}/{x}"], f"{name} d/d{x}",
                     case.meta["tolerance"])


def test_the_command_line_differentiates_a_scalar_loss_to_tensorflows_values(tmp_path, capsys):
    case = load_saved_model_case("custom_gradients")
    np.savez(tmp_path / "feed.npz", **case.signature_inputs("loss"))
    assert cli_main(["grad", str(case.model_path), "--signature", "loss", "--ys", "loss", "--xs", "x",
                     "--feed", str(tmp_path / "feed.npz"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    value = np.array(next(v["values"] for v in printed["values"] if v["name"] == "x"), np.float32)
    assert_close(value, case.expected["din:loss/loss/x"], "d loss/dx", case.meta["tolerance"])


@pytest.mark.parametrize("name,signature,output,x", CASES)
def test_a_frozen_graph_keeps_the_saved_gradients(name, signature, output, x, tmp_path, capsys):
    """gradreg freeze carries the registrations and gradient functions (and the tensors they
    capture, which the outputs alone do not need) into the GraphDef."""
    case = load_saved_model_case(name)
    frozen = tmp_path / "frozen.pb"
    assert cli_main(["freeze", str(case.model_path), "--signature", signature, "-o", str(frozen)]) == 0
    graph = gr.load_graph(str(frozen))
    assert graph.library.registered_gradient_functions()
    value = _gradient(graph, f"{output}:0", f"{x}:0", {f"{x}:0": case.signature_inputs(signature)[x]})
    assert_close(value, case.expected[f"din_ones:{signature}/{output}/{x}"], f"{name} frozen d/d{x}",
                 case.meta["tolerance"])


def test_the_graph_of_a_saved_model_directory_records_the_captures():
    """gradreg.load_graph(DIR) reads the object graph too: each gradient function names the
    tensors of its node's function it takes, and which of its outputs are whose gradients."""
    case = load_saved_model_case("custom_gradients")
    graph = gr.load_graph(str(case.model_path))
    recorded = {}
    for name in graph.library.registered_gradient_functions():
        attrs = {e.key: e.value for e in graph.library.get(name).attr}
        recorded[attrs["_forward_node"].s.decode()] = ([s.decode() for s in attrs["_captured_tensors"].list.s],
                                                        list(attrs["_gradient_outputs"].list.i))
    # damped(h): grad_fn(dy) uses exp(-|h|); silu(features, beta): grad_fn uses both, returns both
    assert recorded == {"IdentityN": (["Exp:0"], [-1, 0]), "IdentityN_1": (["beta:0", "IdentityN:0"], [-1, 0, 1])}


def test_without_what_the_object_graph_says_the_node_still_asks_for_the_forward_flag():
    """Registered gradients without the record of their captures (as in a GraphDef TensorFlow
    exports itself): differentiating the node names it and says what to do."""
    case = load_saved_model_case("custom_gradients")
    model = gr.load_saved_model(str(case.model_path))
    for name in model.graph.library.registered_gradient_functions():
        fdef = model.graph.library.get(name)
        kept = [e for e in fdef.attr if not e.key.startswith(("_captured", "_forward", "_gradient_outputs"))]
        del fdef.attr[:]
        fdef.attr.extend(kept)
    signature = model.signatures["serving_default"]
    with model.graph.as_default():
        (grad,) = gr.gradients(signature.outputs["y"], [signature.inputs["x"]])
    with pytest.raises(GradregError, match="node 'IdentityN.*custom_gradient='forward'"):
        model.session.run(grad, {signature.inputs["x"]: case.signature_inputs("serving_default")["x"]})
