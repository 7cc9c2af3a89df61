"""gradreg.load_saved_model on SavedModels that TensorFlow and Keras wrote: signatures, variables,
gradients with respect to inputs and variables, fine-tuning and saving back, freezing — against
TensorFlow's stored values (no TensorFlow needed), plus round trips through TensorFlow (tf-marked).

Models: tests/data/tf_models/saved_models (tf.Module with two signatures, Keras export, while
loop, Keras LSTM, custom gradients saved with a tf.Module, Keras' EfficientNet with swish),
tests/data/saved_model_io (a TF1 collections-based SavedModel with ref, resource, partitioned
and float64 variables and a main op; a TF2 model gathering from an embedding variable, in
float64), tests/data/checkpoints (tf.Module and Keras exports).
"""
from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest
from tf_models import assert_close, load_saved_model_case

import gradreg as gr
from gradreg.errors import CheckpointError, FeedError, FetchError, SavedModelError, UnsupportedModelFormatError
from gradreg.proto import types_pb2

DATA = pathlib.Path(__file__).parent / "data"
IO = DATA / "saved_model_io"
EXPECTED = dict(np.load(IO / "expected.npz"))
META = json.loads((IO / "case.json").read_text())
IO_MODELS = sorted(META["models"])
LR = META["learning_rate"]
TF_MODELS = ["module_two_signatures", "keras_export", "while_loop", "keras_lstm", "keras_cnn", "custom_gradients",
             "keras_efficientnet", "while_cond"]


def _io(name: str, *parts: str) -> np.ndarray:
    return EXPECTED["|".join((name, *parts))]


def _io_inputs(name: str, signature: str) -> dict[str, np.ndarray]:
    prefix = f"{name}|in|{signature}|"
    return {k[len(prefix):]: v for k, v in EXPECTED.items() if k.startswith(prefix)}


def _io_outputs(name: str, signature: str) -> dict[str, np.ndarray]:
    prefix = f"{name}|out|{signature}|"
    return {k[len(prefix):]: v for k, v in EXPECTED.items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def io_models():
    return {name: gr.load_saved_model(str(IO / name)) for name in IO_MODELS}


# -- loading, signatures, variables ---------------------------------------------------------------
@pytest.mark.parametrize("name", TF_MODELS)
def test_signatures_of_tf_models_return_tensorflows_outputs(name):
    case = load_saved_model_case(name)
    model = gr.load_saved_model(str(case.model_path))
    assert sorted(model.signatures) == sorted(case.meta["signatures"])
    for signature in case.meta["calls"]:
        sig = model.signatures[signature]
        assert sorted(sig.inputs) == sorted(case.meta["signatures"][signature]["inputs"])
        assert sorted(sig.outputs) == sorted(case.meta["signatures"][signature]["outputs"])
        outputs = sig(**case.signature_inputs(signature))
        for key, expected in case.signature_outputs(signature).items():
            assert_close(outputs[key], expected, f"{name}/{signature}/{key}", case.meta["tolerance"])


@pytest.mark.parametrize("name", TF_MODELS)
def test_variables_hold_the_checkpoints_values_under_their_names(name):
    case = load_saved_model_case(name)
    model = gr.load_saved_model(str(case.model_path))
    stored = case.checkpoint_values()
    for var_name, entry in model.model_variables.items():
        np.testing.assert_array_equal(model.session.run(entry.variable), stored[entry.source.key])
        assert case.meta["variables"][entry.source.key]["name"] == var_name
        assert entry.trainable == case.meta["variables"][entry.source.key]["trainable"]


@pytest.mark.parametrize("name", IO_MODELS)
def test_io_models_signatures_variables_and_main_op(name, io_models):
    model = io_models[name]
    meta = META["models"][name]
    assert sorted(model.variables) == sorted(meta["variables"])
    for var_name, info in meta["variables"].items():
        value = model.session.run(model.variables[var_name])
        np.testing.assert_array_equal(value, _io(name, "var", var_name))
        assert model.model_variables[var_name].trainable == info["trainable"]
        assert model.variables[var_name].dtype.name == info["dtype"]
    for signature, info in meta["signatures"].items():
        for key, t in model.signatures[signature].outputs.items():     # dtype and shape as declared
            assert t.dtype.base_dtype.storage == _io_outputs(name, signature)[key].dtype
            assert t.shape.rank == _io_outputs(name, signature)[key].ndim
        outputs = model.signatures[signature](**_io_inputs(name, signature))
        assert sorted(outputs) == sorted(info["outputs"])
        for key, expected in _io_outputs(name, signature).items():
            np.testing.assert_allclose(outputs[key], expected, rtol=1e-6, atol=1e-7)
    if name == "tf1_model":     # a local variable only the main op initializes
        assert model.signatures["serving_default"](x=np.zeros((1, 4), np.float32))["offset"] == 7


def test_tf1_partitioned_variable_keeps_its_slices(io_models):
    model = io_models["tf1_model"]
    parts = [model.model_variables[f"out/kernel/part_{i}"] for i in range(2)]
    assert [p.source.key for p in parts] == ["out/kernel", "out/kernel"]
    assert [p.source.slice_spec for p in parts] == ["5 3 0,3:0,3", "5 3 3,2:0,3"]
    assert not model.is_tf2 and io_models["tf2_embedding"].is_tf2


def test_keras_export_duplicates_are_not_separate_variables():
    """Keras keeps a second list of its variables (`_all_variables`): the signatures' variables
    keep the names, and the graph's restore op reading the other keys is followed on save."""
    model = gr.load_saved_model(str(DATA / "tf_models" / "saved_models" / "keras_export" / "model"))
    assert sorted(model.variables) == ["head/bias", "head/kernel", "hidden/bias", "hidden/kernel"]
    kernel = model.model_variables["hidden/kernel"]
    assert kernel.source.key == "variables/0/.ATTRIBUTES/VARIABLE_VALUE"
    assert kernel.also_saved_as == ("_all_variables/0/.ATTRIBUTES/VARIABLE_VALUE",)


# -- gradients --------------------------------------------------------------------------------------
def _tf_model_gradient_cases():
    for name in TF_MODELS:
        case = load_saved_model_case(name)
        for i, entry in enumerate(case.meta.get("gradients", [])):
            yield pytest.param(name, i, id=f"{name}-{entry['signature']}-{entry['output']}")


@pytest.mark.parametrize("name,index", list(_tf_model_gradient_cases()))
def test_gradients_wrt_inputs_and_variables_match_tensorflow(name, index):
    case = load_saved_model_case(name)
    entry = case.meta["gradients"][index]
    model = gr.load_saved_model(str(case.model_path))
    signature = model.signatures[entry["signature"]]
    wanted = [(k, signature.inputs[k], key) for k, key in entry["inputs"].items() if key]
    wanted += [(k, model.variables[case.meta["variables"][k]["name"]], key)
               for k, key in entry["variables"].items() if key]
    with model.graph.as_default():
        grad_ys = gr.constant(case.inputs[entry["grad_ys"]]) if entry["grad_ys"] else None
        grads = gr.gradients(signature.outputs[entry["output"]], [w[1] for w in wanted], grad_ys=grad_ys)
    assert all(g is not None for g in grads)
    feeds = {signature.inputs[k]: v for k, v in case.signature_inputs(entry["signature"]).items()}
    for (what, _, key), value in zip(wanted, model.session.run(grads, feeds)):
        assert_close(value, case.expected[key], f"{name} d/d{what}", case.meta["tolerance"])


@pytest.mark.parametrize("key", sorted(k for k in EXPECTED if "|grad|" in k))
def test_io_model_gradients_match_tensorflow(key, io_models):
    name, _, signature, output, x = key.split("|")
    model = io_models[name]
    sig = model.signatures[signature]
    target = sig.inputs[x] if x in sig.inputs else model.variables[x]
    with model.graph.as_default():
        (grad,) = gr.gradients(sig.outputs[output], [target])
    value = model.session.run(grad, {sig.inputs[k]: v for k, v in _io_inputs(name, signature).items()})
    np.testing.assert_allclose(value, EXPECTED[key], rtol=1e-5, atol=1e-7)


# -- fine-tuning and saving back ------------------------------------------------------------------------
def _sgd_step(model, steps: int = 1, global_step=None):
    loss = model.signatures["loss"]
    name = pathlib.Path(model.path).name
    with model.graph.as_default():
        train = gr.train.GradientDescentOptimizer(LR).minimize(loss.outputs["loss"], global_step=global_step,
                                                                var_list=model.trainable_variables)
    feeds = {loss.inputs[k]: v for k, v in _io_inputs(name, "loss").items()}
    for _ in range(steps):
        model.session.run(train, feeds)


@pytest.mark.parametrize("name", IO_MODELS)
def test_one_sgd_step_gives_tensorflows_values_and_saves_back(name, tmp_path):
    model = gr.load_saved_model(str(IO / name))
    step = model.variables.get("global_step")
    _sgd_step(model, global_step=step)
    for var_name in META["models"][name]["variables"]:
        np.testing.assert_allclose(model.session.run(model.variables[var_name]), _io(name, "sgd", var_name),
                                   rtol=1e-5, atol=1e-7, err_msg=var_name)
    out = model.save(tmp_path / "tuned")
    assert (tmp_path / "tuned" / "saved_model.pb").read_bytes() == (IO / name / "saved_model.pb").read_bytes()
    again = gr.load_saved_model(out)
    for var_name, var in model.variables.items():
        np.testing.assert_array_equal(again.session.run(again.variables[var_name]), model.session.run(var))
    inputs = _io_inputs(name, "serving_default")
    after = model.signatures["serving_default"](**inputs)
    for key, value in again.signatures["serving_default"](**inputs).items():
        np.testing.assert_array_equal(value, after[key])
    # The original is untouched.
    original = gr.load_saved_model(str(IO / name))
    for var_name in META["models"][name]["variables"]:
        np.testing.assert_array_equal(original.session.run(original.variables[var_name]),
                                      _io(name, "var", var_name))


def test_save_in_place(tmp_path):
    shutil.copytree(IO / "tf2_embedding", tmp_path / "m")
    model = gr.load_saved_model(str(tmp_path / "m"))
    model.variables["bias"].load(np.float64(-3.0), model.session)
    assert model.save() == str(tmp_path / "m")
    again = gr.load_saved_model(str(tmp_path / "m"))
    assert again.session.run(again.variables["bias"]) == -3.0


# -- errors -------------------------------------------------------------------------------------------
def test_errors_name_what_is_wrong(tmp_path, io_models):
    model = io_models["tf2_embedding"]
    with pytest.raises(SavedModelError, match=r"no MetaGraph with tags \['train'\].*\[\['serve'\]\]"):
        gr.load_saved_model(str(IO / "tf2_embedding"), tags=["train"])
    with pytest.raises(SavedModelError, match="no signature 'predict'; there are"):
        model.signatures["predict"]
    with pytest.raises(SavedModelError, match="no variable 'embedding'"):
        model.variables["embedding"]
    with pytest.raises(FeedError, match="has no input 'idz'"):
        model.signatures["serving_default"](idz=np.zeros((1, 3), np.int32))
    with pytest.raises(FeedError, match="needs input 'target'"):
        model.signatures["loss"](ids=np.zeros((1, 3), np.int32))
    with pytest.raises(FetchError, match="has no output 'scores'"):
        model.signatures["serving_default"].run({"ids": np.zeros((1, 3), np.int32)}, ["scores"])
    shutil.copytree(IO / "tf2_embedding", tmp_path / "broken")
    (tmp_path / "broken" / "variables" / "variables.index").unlink()
    with pytest.raises(CheckpointError, match="variables.index: missing"):
        gr.load_saved_model(str(tmp_path / "broken"))
    with pytest.raises(SavedModelError, match="no such SavedModel directory"):
        gr.load_saved_model(str(tmp_path / "nowhere"))
    with pytest.raises(UnsupportedModelFormatError, match="Keras model archive"):
        gr.load_saved_model(str(DATA / "checkpoints" / "other_formats" / "model.keras"))


# -- the format registry ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", [IO / "tf1_model", IO / "tf2_embedding" / "saved_model.pb"])
def test_load_graph_reads_a_saved_models_graph(path):
    graph = gr.load_graph(str(path))
    model = gr.load_saved_model(str(IO / path.relative_to(IO).parts[0]))
    names = {op.name for op in graph.get_operations()}
    assert names and names <= {op.name for op in model.graph.get_operations()}
    assert {t.name for s in model.signatures.values() for t in s.outputs.values()} <= \
        {t.name for op in graph.get_operations() for t in op.outputs}


@pytest.mark.parametrize("file,kind,advice", [
    ("model.keras", "keras", "model.export"), ("model.h5", "hdf5", "keras.models.load_model"),
    ("model.tflite", "tflite", "SavedModel or GraphDef it was converted from")])
def test_foreign_model_files_are_named_with_what_to_do(file, kind, advice, tmp_path):
    source = DATA / "checkpoints" / "other_formats" / file
    for path in (source, tmp_path / "renamed.bin"):           # by suffix, and by content
        shutil.copy(source, tmp_path / "renamed.bin")
        with pytest.raises(UnsupportedModelFormatError, match=advice) as info:
            gr.load_graph(str(path))
        assert info.value.format == kind


def test_checkpoint_index_is_not_a_graph():
    with pytest.raises(UnsupportedModelFormatError, match="TensorFlow checkpoint file"):
        gr.load_graph(str(DATA / "checkpoints" / "tf1" / "model.ckpt-3.index"))


def test_an_onnx_file_is_read_by_the_onnx_familys_format(tmp_path):
    """ONNX is a format gradreg reads (the onnx op family, with the onnx extra): the file that
    the SavedModel branch could only name is loaded, by suffix and by content."""
    pytest.importorskip("onnx")
    source = DATA / "checkpoints" / "other_formats" / "model.onnx"
    shutil.copy(source, tmp_path / "renamed.bin")
    for path in (source, tmp_path / "renamed.bin"):
        graph = gr.load_graph(str(path))
        types = {op.type for op in graph.get_operations()}
        assert any(t.startswith("onnx::") for t in types), types


# -- freezing -------------------------------------------------------------------------------------------
def _all_types(graph_def):
    types = [e.value.type for n in graph_def.node for e in n.attr if e.value.WhichOneof("value") == "type"]
    types += [a.type for f in graph_def.library.function for a in f.signature.input_arg]
    types += [e.value.type for f in graph_def.library.function for n in f.node_def for e in n.attr
              if e.value.WhichOneof("value") == "type"]
    return types


def _frozen_cases():
    for name in TF_MODELS:
        for signature in load_saved_model_case(name).meta["calls"]:
            yield pytest.param("tf_models", name, signature, id=f"{name}-{signature}")
    for name in IO_MODELS:
        for signature in META["models"][name]["signatures"]:
            yield pytest.param("io", name, signature, id=f"{name}-{signature}")


def _model_and_values(source, name, signature):
    if source == "tf_models":
        case = load_saved_model_case(name)
        return (gr.load_saved_model(str(case.model_path)), case.signature_inputs(signature),
                case.signature_outputs(signature))
    return gr.load_saved_model(str(IO / name)), _io_inputs(name, signature), _io_outputs(name, signature)


@pytest.mark.parametrize("source,name,signature", list(_frozen_cases()))
def test_frozen_signature_runs_by_its_names_without_variables(source, name, signature):
    model, inputs, expected = _model_and_values(source, name, signature)
    frozen = model.freeze(signature)
    ops = {n.op for n in frozen.node} | {n.op for f in frozen.library.function for n in f.node_def}
    assert not ops & {"VarHandleOp", "VariableV2", "ReadVariableOp", "ResourceGather", "RestoreV2"}
    assert types_pb2.DT_RESOURCE not in _all_types(frozen)
    graph = gr.import_graph_def(frozen)
    values = gr.Session(graph).run([f"{k}:0" for k in expected], {f"{k}:0": v for k, v in inputs.items()})
    for (key, want), got in zip(expected.items(), values):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=key)


def test_freeze_after_fine_tuning_uses_the_current_values():
    model = gr.load_saved_model(str(IO / "tf2_embedding"))
    _sgd_step(model)
    inputs = _io_inputs("tf2_embedding", "serving_default")
    tuned = model.signatures["serving_default"](**inputs)["score"]
    graph = gr.import_graph_def(model.freeze())
    np.testing.assert_array_equal(gr.Session(graph).run("score:0", {"ids:0": inputs["ids"]}), tuned)
    assert not np.allclose(tuned, _io_outputs("tf2_embedding", "serving_default")["score"])


# -- TensorFlow round trips -------------------------------------------------------------------------------
@pytest.mark.tf
@pytest.mark.parametrize("name", ["module_two_signatures", "keras_export", "tf2_embedding"])
def test_tensorflow_loads_the_fine_tuned_model(name, tmp_path):
    tf = pytest.importorskip("tensorflow")
    if name in IO_MODELS:
        model = gr.load_saved_model(str(IO / name))
        _sgd_step(model, steps=3)
        signature, inputs = "serving_default", _io_inputs(name, "serving_default")
    else:
        case = load_saved_model_case(name)
        model = gr.load_saved_model(str(case.model_path))
        signature = next(iter(case.meta["calls"]))
        inputs = case.signature_inputs(signature)
        sig = model.signatures[signature]
        out = next(iter(sig.outputs.values()))
        with model.graph.as_default():
            train = gr.train.GradientDescentOptimizer(0.1).minimize(gr.reduce_sum(out * out),
                                                                    var_list=model.trainable_variables)
        for _ in range(3):
            model.session.run(train, {sig.inputs[k]: v for k, v in inputs.items()})
    ours = model.signatures[signature](**inputs)
    loaded = tf.saved_model.load(model.save(tmp_path / "tuned"))
    theirs = loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
    for key, value in ours.items():
        np.testing.assert_allclose(theirs[key].numpy(), value, rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.tf
def test_tensorflow_v1_loader_sees_the_fine_tuned_tf1_model(tmp_path):
    tf = pytest.importorskip("tensorflow")
    model = gr.load_saved_model(str(IO / "tf1_model"))
    _sgd_step(model, steps=2, global_step=model.variables["global_step"])
    ours = {name: model.session.run(var) for name, var in model.variables.items()}
    out = model.save(tmp_path / "tuned")
    inputs = _io_inputs("tf1_model", "serving_default")
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        meta = tf.compat.v1.saved_model.load(sess, ["serve"], out)
        theirs = sess.run({v.op.name: v for v in tf.compat.v1.global_variables()})
        assert sorted(theirs) == sorted(ours)
        for name, value in ours.items():
            np.testing.assert_array_equal(theirs[name], value)
        sig = meta.signature_def["serving_default"]
        logits = sess.run(sig.outputs["logits"].name, {sig.inputs["x"].name: inputs["x"]})
    np.testing.assert_allclose(logits, model.signatures["serving_default"](**inputs)["logits"], rtol=1e-6)
    assert ours["global_step"] == 2


@pytest.mark.tf
@pytest.mark.parametrize("source,name,signature", list(_frozen_cases()))
def test_tensorflow_runs_the_frozen_graph_to_the_same_numbers(source, name, signature, tmp_path):
    tf = pytest.importorskip("tensorflow")
    model, inputs, expected = _model_and_values(source, name, signature)
    graph_def = tf.compat.v1.GraphDef.FromString(model.freeze(signature).SerializeToString())
    with tf.Graph().as_default():
        tf.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session() as sess:
            values = sess.run([f"{k}:0" for k in expected], {f"{k}:0": v for k, v in inputs.items()})
    for (key, want), got in zip(expected.items(), values):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=key)
