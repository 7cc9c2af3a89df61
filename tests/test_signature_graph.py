"""SavedModel signatures as flat graphs (calls inlined) and their gradients, written as a GraphDef
that runs with the model's variables or frozen, and as a SavedModel with a gradients signature
that TensorFlow loads and serves — against TensorFlow's stored values (tests/data/tf_models/
saved_models: a Keras CNN with BatchNormalization, Keras MLP and LSTM exports, tf.Modules with two
signatures and with a while loop; made by tests/data/tf_models/make_reference.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tf_models import SAVED_MODELS, assert_close, load_saved_model_case

import gradreg as gr
from gradreg import cli
from gradreg.build.inline import CALL_TYPES, inline_calls
from gradreg.errors import FetchError, FileWriteError, SavedModelError
from gradreg.formats.gradient_saved_model import save_gradient_saved_model
from gradreg.formats.signature_graph import gradient_name, signature_gradients, signature_graph

MODELS = ["keras_cnn", "module_two_signatures", "keras_export", "while_loop", "keras_lstm"]
CNN = "keras_cnn"


def _run(argv, capsys):
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:        # usage errors exit through argparse
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _gradient_cases(names=MODELS):
    for name in names:
        case = load_saved_model_case(name)
        for i, entry in enumerate(case.meta["gradients"]):
            yield pytest.param(name, i, id=f"{name}-{entry['signature']}-{entry['output']}")


def _wanted(case, model, entry):
    """(x as gradreg names it, key of TensorFlow's gradient in expected.npz) for every input and
    variable TensorFlow differentiated ``entry``'s output by."""
    by_key = {v.source.key: name for name, v in model.model_variables.items()}
    wanted = [(k, key) for k, key in entry["inputs"].items() if key]
    return wanted + [(by_key[k], key) for k, key in entry["variables"].items() if key]


def _gradients(case, model, entry):
    wanted = _wanted(case, model, entry)
    grad_ys = {entry["output"]: case.inputs[entry["grad_ys"]]} if entry["grad_ys"] else None
    flat = signature_gradients(model, [entry["output"]], [x for x, _ in wanted], signature=entry["signature"],
                               grad_ys=grad_ys)
    return flat, wanted


@pytest.fixture(scope="module")
def models():
    return {name: gr.load_saved_model(str(load_saved_model_case(name).model_path)) for name in MODELS}


# -- inlining ---------------------------------------------------------------------------------------
def test_inlined_calls_are_named_inside_their_call_and_compute_the_same(graph):
    double = gr.function(lambda v: v * 2.0, name="double")
    twice = gr.function(lambda v: double(v) + 1.0, name="twice")
    x = gr.placeholder(gr.float32, [3], name="x")
    y = gr.identity(twice(x), name="y")
    flat = inline_calls(graph, [y], fed=[x])
    ops = {n.op for n in flat.graph_def.node}
    assert not ops & {*CALL_TYPES, "double", "twice"} and not flat.graph_def.library.function
    inner = [n.name for n in flat.graph_def.node if n.op == "Mul"]
    assert len(inner) == 1 and inner[0].count("/") == 2      # <call of twice>/<call of double>/mul
    flat_graph = gr.import_graph_def(flat.graph_def)
    value = gr.Session(flat_graph).run(flat.tensors[y], {"x:0": np.array([1.0, 2.0, 3.0], np.float32)})
    np.testing.assert_array_equal(value, [3.0, 5.0, 7.0])


def test_a_control_input_of_a_call_holds_back_the_body(graph):
    x = gr.placeholder(gr.float32, [], name="x")
    gate = gr.no_op(name="gate")
    constant = gr.function(lambda v: gr.constant(4.0, name="four") + v * 0.0, name="constant")
    with gr.control_dependencies([gate]):
        y = constant(x)
    flat = inline_calls(graph, [y], fed=[x])
    four = next(n for n in flat.graph_def.node if n.name.endswith("/four"))
    assert "^gate" in four.input


@pytest.mark.parametrize("name", MODELS)
def test_signature_graph_has_no_calls_and_returns_tensorflows_outputs(name, models):
    case = load_saved_model_case(name)
    for signature in case.meta["calls"]:
        flat = signature_graph(models[name], signature)
        assert not {op.type for op in flat.graph.get_operations()} & {*CALL_TYPES, "SymbolicGradient"}
        assert sorted(flat.inputs) == sorted(case.meta["signatures"][signature]["inputs"])
        assert {t.op.name for t in flat.inputs.values()} == set(flat.inputs)
        values = flat.run(case.signature_inputs(signature))
        for key, expected in case.signature_outputs(signature).items():
            assert flat.outputs[key].op.name == key
            assert flat.outputs[key].shape.rank == len(case.meta["signatures"][signature]["outputs"][key]["shape"])
            assert_close(values[key], expected, f"{name} {signature} {key}", case.meta["tolerance"])


def test_keras_cnn_variables_keep_their_names_and_are_read_directly(models):
    flat = signature_graph(models[CNN])
    assert sorted(flat.variables) == ["bn1/beta", "bn1/gamma", "bn1/moving_mean", "bn1/moving_variance",
                                      "conv1/bias", "conv1/kernel", "probs/bias", "probs/kernel"]
    reads = [op for op in flat.graph.get_operations() if op.type == "ReadVariableOp"]
    assert {op.inputs[0].op.name for op in reads} == set(flat.variables)
    assert flat.variables["bn1/moving_mean"].trainable is False


# -- gradients ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,index", list(_gradient_cases()))
def test_flat_gradients_match_tensorflow(name, index, models):
    case = load_saved_model_case(name)
    entry = case.meta["gradients"][index]
    flat, wanted = _gradients(case, models[name], entry)
    assert "SymbolicGradient" not in {op.type for op in flat.graph.get_operations()}
    values = flat.run(case.signature_inputs(entry["signature"]))
    for x, key in wanted:
        assert flat.gradients[x].op.name == gradient_name(x)
        assert flat.gradients[x].shape.is_fully_defined() or x in flat.inputs
        assert_close(values[gradient_name(x)], case.expected[key], f"{name} d/d{x}", case.meta["tolerance"])


def test_keras_cnn_gradient_graph_holds_the_backward_ops_with_known_shapes(models):
    flat = signature_gradients(models[CNN], ["output_0"], ["image", "conv1/kernel", "bn1/moving_mean"])
    types = {op.type for op in flat.graph.get_operations() if op.name.startswith("gradients/")}
    assert {"Conv2DBackpropFilter", "Conv2DBackpropInput", "MaxPoolGrad", "ReluGrad"} <= types
    assert flat.gradients["image"].shape.as_list() == [None, 6, 6, 2]
    assert flat.gradients["conv1/kernel"].shape.as_list() == [3, 3, 2, 4]
    assert flat.gradients["bn1/moving_mean"].shape.as_list() == [4]


@pytest.mark.parametrize("name,index", list(_gradient_cases(["keras_cnn", "while_loop", "module_two_signatures"])))
def test_frozen_gradient_graph_needs_no_variables(name, index, models):
    case = load_saved_model_case(name)
    entry = case.meta["gradients"][index]
    flat, wanted = _gradients(case, models[name], entry)
    graph = gr.import_graph_def(flat.graph_def(freeze=True))
    assert not {op.type for op in graph.get_operations()} & {"VarHandleOp", "ReadVariableOp"}
    feeds = {f"{k}:0": v for k, v in case.signature_inputs(entry["signature"]).items()}
    values = gr.Session(graph).run([f"{gradient_name(x)}:0" for x, _ in wanted], feeds)
    for (x, key), value in zip(wanted, values):
        assert_close(value, case.expected[key], f"{name} d/d{x}", case.meta["tolerance"])


def test_unknown_x_and_y_name_what_there_is(models):
    with pytest.raises(FetchError, match=r"neither an input .* nor a variable .*conv1/kernel"):
        signature_gradients(models[CNN], ["output_0"], ["conv1/kernal"])
    with pytest.raises(FetchError, match=r"no output 'logits'; its outputs are \['output_0'\]"):
        signature_gradients(models[CNN], ["logits"], ["image"])


# -- the command line -------------------------------------------------------------------------------------
def test_grad_writes_a_flat_graph_that_runs_with_the_saved_models_variables(tmp_path, capsys):
    case = load_saved_model_case(CNN)
    entry = case.meta["gradients"][1]            # serving_default
    inputs = case.signature_inputs("serving_default")
    np.savez(tmp_path / "in.npz", **inputs)
    code, out, _ = _run(["grad", case.model_path, "--ys", "output_0", "--xs", "image,bn1/moving_mean",
                         "-o", tmp_path / "g.pb"], capsys)
    assert code == 0 and "functions inlined" in out and "d/dbn1/moving_mean: bn1/moving_mean_grad" in out
    graph = gr.load_graph(tmp_path / "g.pb")
    assert not {op.type for op in graph.get_operations()} & {*CALL_TYPES, "SymbolicGradient"}
    code, out, _ = _run(["run", tmp_path / "g.pb", "--checkpoint", case.model_path, "--feed", tmp_path / "in.npz",
                         "--fetch", "output_0,image_grad,bn1/moving_mean_grad", "--json"], capsys)
    assert code == 0
    values = {o["name"]: np.array(o["values"], np.float32) for o in json.loads(out)["outputs"]}
    assert_close(values["output_0:0"], case.signature_outputs("serving_default")["output_0"], "output_0")
    # TensorFlow's are for a random cotangent: ones here, so compare with gradreg's own of ones
    flat = signature_gradients(gr.load_saved_model(str(case.model_path)), ["output_0"], ["bn1/moving_mean"])
    assert_close(values["bn1/moving_mean_grad:0"], flat.run(inputs)["bn1/moving_mean_grad"], "d/dmoving_mean")
    assert entry["signature"] == "serving_default"


def test_grad_freeze_writes_constants(tmp_path, capsys):
    case = load_saved_model_case("module_two_signatures")
    code, out, _ = _run(["grad", case.model_path, "--signature", "loss", "--ys", "loss", "--xs", "dense/kernel,x",
                         "-o", tmp_path / "g.pb", "--freeze"], capsys)
    assert code == 0 and "variables as constants" in out
    graph = gr.load_graph(tmp_path / "g.pb")
    assert "VarHandleOp" not in {op.type for op in graph.get_operations()}
    entry = next(e for e in case.meta["gradients"] if e["signature"] == "loss")
    feeds = {f"{k}:0": v for k, v in case.signature_inputs("loss").items()}
    value = gr.Session(graph).run("dense/kernel_grad:0", feeds)
    assert_close(value, case.expected[entry["variables"][_key(case, "dense/kernel")]], "d/ddense/kernel")


def _key(case, name):
    return next(k for k, v in case.meta["variables"].items() if v["name"] == name)


def test_grad_usage_errors(tmp_path, capsys):
    case = load_saved_model_case(CNN)
    code, _, err = _run(["grad", case.model_path, "--ys", "output_0", "--xs", "image", "--freeze"], capsys)
    assert code == 2 and "--freeze applies to -o GRAPH" in err
    code, _, err = _run(["grad", case.model_path, "--ys", "output_0", "--xs", "image", "--freeze",
                         "-o", f"{tmp_path}/out/"], capsys)
    assert code == 2 and "a SavedModel keeps its variables" in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    code, _, err = _run(["grad", case.model_path, "--ys", "output_0", "--xs", "image", "-o", tmp_path / "full"],
                        capsys)
    assert code == 1 and "not an empty directory" in err


# -- the gradients SavedModel ---------------------------------------------------------------------------
def test_gradient_saved_model_refuses_tf1_models_and_itself(tmp_path):
    io = SAVED_MODELS.parent.parent / "saved_model_io" / "tf1_model"
    tf1 = gr.load_saved_model(str(io))
    flat = signature_gradients(tf1, ["logits"], ["x"])
    with pytest.raises(SavedModelError, match="TF1 SavedModel"):
        save_gradient_saved_model(tf1, flat, tmp_path / "out")
    model = gr.load_saved_model(str(load_saved_model_case(CNN).model_path))
    with pytest.raises(FileWriteError, match="the SavedModel itself"):
        save_gradient_saved_model(model, signature_gradients(model, ["output_0"], ["image"]), model.path)


def test_gradreg_runs_the_gradients_signature_it_wrote(tmp_path, models):
    case = load_saved_model_case(CNN)
    flat = signature_gradients(models[CNN], ["output_0"], ["image", "conv1/kernel"])
    inputs = case.signature_inputs("serving_default")
    ours = flat.run(inputs)
    written = gr.load_saved_model(save_gradient_saved_model(models[CNN], flat, tmp_path / "out"))
    assert sorted(written.signatures) == ["gradients", "serve", "serving_default"]
    assert not (tmp_path / "out" / "fingerprint.pb").exists()
    theirs = written.signatures["gradients"](**inputs)
    assert sorted(theirs) == ["conv1/kernel_grad", "image_grad", "output_0"]
    for key, value in ours.items():
        np.testing.assert_allclose(theirs[key], value, rtol=1e-6, atol=1e-7, err_msg=key)


@pytest.mark.tf
@pytest.mark.parametrize("name", ["keras_cnn", "module_two_signatures", "while_loop", "keras_lstm"])
def test_tensorflow_loads_and_serves_the_gradients_signature(name, tmp_path, models):
    tf = pytest.importorskip("tensorflow")
    case = load_saved_model_case(name)
    entry = case.meta["gradients"][-1]
    flat, wanted = _gradients(case, models[name], entry)
    inputs = case.signature_inputs(entry["signature"])
    ours = flat.run(inputs)
    out = str(save_gradient_saved_model(models[name], flat, tmp_path / "out"))
    loaded = tf.saved_model.load(out)
    theirs = loaded.signatures["gradients"](**{k: tf.constant(v) for k, v in inputs.items()})
    assert sorted(theirs) == sorted(ours)
    for key, value in ours.items():
        np.testing.assert_allclose(theirs[key].numpy(), value, rtol=1e-5, atol=1e-6, err_msg=key)
    for x, key in wanted:
        assert_close(theirs[gradient_name(x)].numpy(), case.expected[key], f"{name} d/d{x}", case.meta["tolerance"])
    for signature in case.meta["calls"]:         # the original signatures still work
        feeds = {k: tf.constant(v) for k, v in case.signature_inputs(signature).items()}
        values = loaded.signatures[signature](**feeds)
        for key, expected in case.signature_outputs(signature).items():
            assert_close(values[key].numpy(), expected, f"{signature} {key}", case.meta["tolerance"])
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:      # as TensorFlow Serving loads it
        meta = tf.compat.v1.saved_model.load(sess, ["serve"], out)
        sig = meta.signature_def["gradients"]
        served = sess.run({k: v.name for k, v in sig.outputs.items()},
                          {sig.inputs[k].name: v for k, v in inputs.items()})
    for key, value in ours.items():
        np.testing.assert_allclose(served[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


def test_grad_writes_the_gradients_saved_model(tmp_path, capsys):
    case = load_saved_model_case(CNN)
    code, out, _ = _run(["grad", case.model_path, "--ys", "output_0", "--xs", "image,probs/bias",
                         "-o", f"{tmp_path}/out/"], capsys)
    assert code == 0 and "signature 'gradients'" in out and "d/dprobs/bias: probs/bias_grad" in out
    inputs = case.signature_inputs("serving_default")
    np.savez(tmp_path / "in.npz", **inputs)
    code, out, _ = _run(["run", tmp_path / "out", "--signature", "gradients", "--feed", tmp_path / "in.npz",
                         "--json"], capsys)
    assert code == 0
    values = {o["name"]: np.array(o["values"], np.float32) for o in json.loads(out)["outputs"]}
    assert sorted(values) == ["image_grad", "output_0", "probs/bias_grad"]
    # d/dbias of sum(softmax) is zero up to roundoff: the probabilities sum to one
    np.testing.assert_allclose(values["probs/bias_grad"], 0.0, atol=1e-6)


def test_a_tf1_models_flat_graph_restores_its_variables_and_the_local_one_its_init_op_sets(tmp_path, capsys):
    tf1 = SAVED_MODELS.parent.parent / "saved_model_io" / "tf1_model"
    code, out, _ = _run(["grad", tf1, "--ys", "logits", "--xs", "x", "-o", tmp_path / "g.pb"], capsys)
    assert code == 0 and "fetch logits, offset, probabilities, x_grad" in out
    x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    code, out, _ = _run(["run", tmp_path / "g.pb", "--checkpoint", tf1, "--feed", f"x={x.tolist()}",
                         "--fetch", "x_grad,offset", "--json"], capsys)
    assert code == 0
    values = {o["name"]: np.array(o["values"]) for o in json.loads(out)["outputs"]}
    assert values["offset:0"] == 7                      # a local variable: the model's main op sets it
    model = gr.load_saved_model(str(tf1))
    sig = model.signatures["serving_default"]
    with model.graph.as_default():
        (expected,) = gr.gradients(sig.outputs["logits"], [sig.inputs["x"]])
    np.testing.assert_allclose(values["x_grad:0"], model.session.run(expected, {sig.inputs["x"]: x}), rtol=1e-6)
