"""TensorFlow v1 checkpoints (model.ckpt-N.index / .data-*) in gradreg's train.Saver: restored
into graphs by variable name (partitioned variables by their slices), written in TensorFlow's
format, and the graph's own save/restore ops run. Values from TensorFlow's stored data; a
tf-marked test has TensorFlow read what gradreg wrote."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import CheckpointError, GradregError
from gradreg.formats import tf_checkpoint
from gradreg.formats.tensor_bundle import BundleReader

DATA = pathlib.Path(__file__).parent / "data"
TF1 = DATA / "checkpoints" / "tf1"
CKPT = dict(np.load(DATA / "checkpoints" / "expected.npz"))
V1 = DATA / "tf_models" / "saved_models" / "v1_checkpoint"


def _imported(step: int = 3):
    graph = gr.Graph()
    with graph.as_default():
        saver = gr.train.import_meta_graph(str(TF1 / f"model.ckpt-{step}.meta"))
    return graph, saver


def _values(graph, session) -> dict[str, np.ndarray]:
    with graph.as_default():
        return {v.op.name: session.run(v) for v in gr.global_variables()}


def _assemble(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Variable values keyed as the checkpoint keys them (the parts of emb concatenated)."""
    parts = [values[f"emb/part_{i}"] for i in range(3)]
    out = {k: v for k, v in values.items() if not k.startswith("emb/")}
    out["emb"] = np.concatenate(parts)
    return out


@pytest.mark.parametrize("step", [2, 3])
def test_restore_a_tensorflow_checkpoint_with_a_partitioned_variable(step):
    graph, saver = _imported(step)
    session = gr.Session(graph)
    saver.restore(session, str(TF1 / f"model.ckpt-{step}"))
    values = _assemble(_values(graph, session))
    assert sorted(values) == ["dense/bias", "dense/kernel", "emb", "global_step"]
    for key, value in values.items():
        np.testing.assert_array_equal(value, CKPT[f"tf1/model.ckpt-{step}|{key}"])


def test_restore_finds_the_newest_checkpoint_of_a_directory():
    graph, saver = _imported()
    session = gr.Session(graph)
    assert gr.train.latest_checkpoint(str(TF1)) == str(TF1 / "model.ckpt-3")
    saver.restore(session, str(TF1))
    assert _values(graph, session)["global_step"] == CKPT["tf1/model.ckpt-3|global_step"]
    saver.restore(session, str(TF1 / "model.ckpt-2.index"))
    assert _values(graph, session)["global_step"] == CKPT["tf1/model.ckpt-2|global_step"]


def test_the_graphs_own_restore_op_runs():
    """save/restore_all: RestoreV2 with slices, Assign into ref variables."""
    graph, _ = _imported()
    session = gr.Session(graph)
    session.run("save/restore_all", {"save/Const:0": str(TF1 / "model.ckpt-2")})
    for key, value in _assemble(_values(graph, session)).items():
        np.testing.assert_array_equal(value, CKPT[f"tf1/model.ckpt-2|{key}"])


def test_the_graphs_own_save_op_writes_a_bundle_where_the_caller_granted(tmp_path):
    graph, saver = _imported()
    session = gr.Session(graph, allow_files=[tmp_path])
    saver.restore(session, str(TF1 / "model.ckpt-3"))
    session.run("save/control_dependency", {"save/Const:0": str(tmp_path / "again")})
    reader = BundleReader(str(tmp_path / "again"))
    for key in ("dense/kernel", "dense/bias", "global_step", "emb"):
        np.testing.assert_array_equal(reader.read(key), CKPT[f"tf1/model.ckpt-3|{key}"])


def test_restore_into_a_graph_def_by_variable_names():
    """The graph of a TF1 training run (graph.pb) with ref and resource variables."""
    graph = gr.load_graph(str(V1 / "graph.pb"))
    session = gr.Session(graph)
    gr.train.Saver(gr.train.find_variables(graph)).restore(session, str(V1 / "model.ckpt-3"))
    expected = np.load(V1 / "expected.npz")
    inputs = np.load(V1 / "inputs.npz")
    with graph.as_default():
        values = {v.op.name: session.run(v) for v in gr.global_variables()}
    for name in ("dense/kernel", "dense/bias", "global_step"):
        np.testing.assert_array_equal(values[name], expected[f"var:{name}"])
    loss = session.run("loss:0", {k: inputs[k] for k in inputs.files})
    np.testing.assert_allclose(loss, expected["y:loss:0"], rtol=1e-6)


def _trained_graph():
    graph = gr.Graph()
    with graph.as_default():
        w = gr.get_variable("dense/kernel", [3, 2], dtype=gr.float64)
        b = gr.get_variable("dense/bias", [2], initializer=gr.zeros_initializer(), use_resource=False)
        step = gr.train.get_or_create_global_step()
        x = gr.placeholder(gr.float64, [None, 3], name="x")
        loss = gr.reduce_sum(gr.square(gr.matmul(x, w) + gr.cast(b, gr.float64)))
        train = gr.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
        init = gr.global_variables_initializer()
    session = gr.Session(graph)
    session.run(init)
    for _ in range(3):
        session.run(train, {x: np.ones((2, 3))})
    return graph, session, init


@pytest.mark.parametrize("how", ["format", "suffix"])
def test_saver_writes_tensorflows_format_and_reads_it_back(tmp_path, how):
    graph, session, init = _trained_graph()
    with graph.as_default():
        saver = gr.train.Saver(format="tf") if how == "format" else gr.train.Saver()
        prefix = saver.save(session, str(tmp_path / ("model" if how == "format" else "model.ckpt")),
                            global_step=gr.train.get_or_create_global_step())
        before = _values(graph, session)
    assert prefix.endswith("-3") and (tmp_path / (pathlib.Path(prefix).name + ".index")).exists()
    assert tf_checkpoint.latest_checkpoint(str(tmp_path)) == prefix == gr.train.latest_checkpoint(str(tmp_path))
    assert sorted(BundleReader(prefix).keys()) == sorted(before)        # slots and the step too
    session.run(init)
    saver.restore(session, prefix)
    for name, value in _values(graph, session).items():
        np.testing.assert_array_equal(value, before[name])


def test_npz_stays_the_default_and_max_to_keep_applies_to_both(tmp_path):
    graph, session, _ = _trained_graph()
    with graph.as_default():
        assert gr.train.Saver().save(session, str(tmp_path / "npz" / "model")).endswith("model.npz")
        saver = gr.train.Saver(format="tf", max_to_keep=2)
        for step in range(4):
            saver.save(session, str(tmp_path / "tf" / "model"), global_step=step)
    assert sorted(p.name for p in (tmp_path / "tf").glob("*.index")) == ["model-2.index", "model-3.index"]
    with pytest.raises(GradregError, match="the formats are npz, tf"):
        gr.train.Saver(format="h5")


def test_restore_errors_name_the_variable_and_change_nothing(tmp_path):
    graph, session, _ = _trained_graph()
    with graph.as_default():
        prefix = gr.train.Saver(format="tf").save(session, str(tmp_path / "m"))
        before = _values(graph, session)
        other = gr.Graph()
    with other.as_default():
        gr.get_variable("dense/kernel", [3, 2], dtype=gr.float32)
        gr.get_variable("missing", [1])
        s2 = gr.Session(other)
        s2.run(gr.global_variables_initializer())
        with pytest.raises(CheckpointError, match="'dense/kernel' is float32 in the graph but float64"):
            gr.train.Saver(gr.global_variables()[:1]).restore(s2, prefix)
        with pytest.raises(CheckpointError, match="checkpoint has no variable 'missing'"):
            gr.train.Saver(gr.global_variables()[1:]).restore(s2, prefix)
    assert _values(graph, session).keys() == before.keys()


def test_import_meta_graph_needs_an_empty_default_graph():
    graph = gr.Graph()
    with graph.as_default():
        gr.constant(1.0, name="c")
        with pytest.raises(GradregError, match="must be empty"):
            gr.train.import_meta_graph(str(TF1 / "model.ckpt-3.meta"))


@pytest.mark.tf
def test_tensorflow_restores_what_gradreg_wrote(tmp_path):
    tf = pytest.importorskip("tensorflow")
    graph, saver = _imported()
    session = gr.Session(graph)
    saver.restore(session, str(TF1 / "model.ckpt-3"))
    with graph.as_default():
        for v in gr.global_variables():          # change every value, partitions included
            v.load(session.run(v) * 3 if v.dtype.is_floating else session.run(v) + 5, session)
        ours = _assemble(_values(graph, session))
        prefix = gr.train.Saver(format="tf").save(session, str(tmp_path / "model.ckpt"), global_step=9)
    reader = tf.train.load_checkpoint(prefix)
    for key, value in ours.items():
        np.testing.assert_array_equal(reader.get_tensor(key), value)
    with tf.Graph().as_default():
        tf_saver = tf.compat.v1.train.import_meta_graph(str(TF1 / "model.ckpt-3.meta"))
        with tf.compat.v1.Session() as sess:
            tf_saver.restore(sess, tf.train.latest_checkpoint(str(tmp_path)))
            theirs = sess.run({v.op.name: v for v in tf.compat.v1.global_variables()})
    for key, value in _assemble(theirs).items():
        np.testing.assert_array_equal(value, ours[key])
