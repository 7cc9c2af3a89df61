"""Issue 27: gradreg on model files an attacker wrote. Nothing is read outside the model, written or
deleted outside where the caller said, and every refusal is a one-line typed error (docs/security.md).

Each test builds its hostile file itself (a GraphDef whose file ops name paths outside, a SavedModel
whose init op writes elsewhere, links out of a SavedModel, a checkpoint state file naming other
directories, garbage where a checkpoint should be) and checks both the refusal and that the files
outside are exactly as they were.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest
from google.protobuf import text_format

import gradreg as gr
from gradreg import cli, config
from gradreg.errors import CheckpointError, FeedError, FileAccessError, SavedModelError
from gradreg.formats import tf_checkpoint
from gradreg.formats.saved_model import write_saved_model_variables
from gradreg.formats.tensor_bundle import BundleReader, write_bundle
from gradreg.proto import graph_pb2, saved_model_pb2

DATA = pathlib.Path(__file__).parent / "data"
SAVED_MODULE = DATA / "checkpoints" / "saved_module"     # a tf.Module SavedModel TensorFlow wrote
TF1_CHECKPOINTS = DATA / "checkpoints" / "tf1"


# -- building hostile files -------------------------------------------------------------------
def _string_const(name: str, values: list[str], vector: bool = True) -> str:
    dims = f"dim {{ size: {len(values)} }}" if vector else ""
    vals = " ".join(f'string_val: "{v}"' for v in values)
    return (f'node {{ name: "{name}" op: "Const" attr {{ key: "dtype" value {{ type: DT_STRING }} }} '
            f'attr {{ key: "value" value {{ tensor {{ dtype: DT_STRING tensor_shape {{ {dims} }} {vals} }} }} }} }}\n')


def _float_const(name: str, value: float) -> str:
    return (f'node {{ name: "{name}" op: "Const" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }} '
            f'attr {{ key: "value" value {{ tensor {{ dtype: DT_FLOAT tensor_shape {{}} float_val: {value} }} }} }} '
            '}\n')


def _save_nodes(prefix: str, name: str = "save") -> str:
    return (_string_const(f"{name}_prefix", [prefix], vector=False) + _string_const(f"{name}_names", ["w"])
            + _string_const(f"{name}_slices", [""]) + _float_const(f"{name}_w", 42.0)
            + f'node {{ name: "{name}" op: "SaveV2" input: "{name}_prefix" input: "{name}_names" '
              f'input: "{name}_slices" input: "{name}_w" '
              'attr { key: "dtypes" value { list { type: DT_FLOAT } } } }\n')


def _restore_nodes(prefix: str) -> str:
    return (_string_const("restore_prefix", [prefix], vector=False) + _string_const("restore_names", ["w"])
            + _string_const("restore_slices", [""])
            + 'node { name: "restore" op: "RestoreV2" input: "restore_prefix" input: "restore_names" '
              'input: "restore_slices" attr { key: "dtypes" value { list { type: DT_FLOAT } } } }\n')


def _merge_nodes(sources: list[str], destination: str) -> str:
    return (_string_const("merge_sources", sources) + _string_const("merge_destination", [destination], vector=False)
            + 'node { name: "merge" op: "MergeV2Checkpoints" input: "merge_sources" input: "merge_destination" }\n')


def _graph_file(path: pathlib.Path, text: str) -> str:
    path.write_bytes(text_format.Parse(text, graph_pb2.GraphDef()).SerializeToString())
    return str(path)


def _snapshot(directory: pathlib.Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes: what must not change."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _cli(argv, capsys) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _one_line(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


@pytest.fixture
def outside(tmp_path) -> pathlib.Path:
    """A directory outside every model, holding a bundle and a file an attacker wants."""
    place = tmp_path / "outside"
    place.mkdir()
    write_bundle(str(place / "secret"), {"w": np.array(1234.5, np.float32)})
    (place / "precious.txt").write_text("do not touch")
    return place


@pytest.fixture
def model_dir(tmp_path) -> pathlib.Path:
    place = tmp_path / "model"
    place.mkdir()
    return place


# -- 1. file ops in a graph run with the file's paths -------------------------------------------
@pytest.mark.parametrize("prefix", ["absolute", "dotdot"])
def test_save_op_cannot_write_outside(model_dir, outside, capsys, prefix):
    target = str(outside / "written") if prefix == "absolute" else "../outside/written"
    path = _graph_file(model_dir / "g.pb", _save_nodes(target))
    before = _snapshot(outside)
    with pytest.raises(FileAccessError, match=r"node 'save' \(op SaveV2\) writes .*written"):
        gr.Session(gr.load_graph(path)).run("save")
    code, err = _cli(["run", path, "--fetch", "save"], capsys)
    assert code == 1
    _one_line(err, "'save'", "SaveV2", "--allow-files")
    assert _snapshot(outside) == before


def test_save_op_writes_where_the_caller_granted(model_dir, outside, capsys):
    path = _graph_file(model_dir / "g.pb", _save_nodes(str(outside / "written")))
    code, err = _cli(["run", path, "--fetch", "save", "--allow-files", outside], capsys)
    assert code == 0, err
    assert BundleReader(str(outside / "written")).read("w") == np.float32(42.0)


def test_save_op_may_not_write_inside_the_model_either(model_dir, capsys):
    """Reading its own directory is the model's; writing anywhere is the caller's to grant."""
    path = _graph_file(model_dir / "g.pb", _save_nodes("inside"))
    with pytest.raises(FileAccessError, match="writes 'inside'"):
        gr.Session(gr.load_graph(path)).run("save")
    assert sorted(os.listdir(model_dir)) == ["g.pb"]


@pytest.mark.parametrize("prefix", ["absolute", "dotdot"])
def test_restore_op_cannot_read_an_outside_bundle(model_dir, outside, capsys, prefix):
    target = str(outside / "secret") if prefix == "absolute" else "../outside/secret"
    path = _graph_file(model_dir / "g.pb", _restore_nodes(target))
    with pytest.raises(FileAccessError, match=r"node 'restore' \(op RestoreV2\) reads .*secret\.index"):
        gr.Session(gr.load_graph(path)).run("restore:0")
    code, err = _cli(["run", path, "--fetch", "restore"], capsys)
    assert code == 1
    _one_line(err, "'restore'", "RestoreV2")
    assert "1234.5" not in capsys.readouterr().out


def test_restore_op_reads_a_bundle_inside_its_saved_model(model_dir):
    """A SavedModel's ops may read its own directory: relative prefixes join the model's directory."""
    _saved_model(model_dir, _restore_nodes("vars") + 'node { name: "init" op: "NoOp" }')
    write_bundle(str(model_dir / "vars"), {"w": np.array(7.0, np.float32)})
    assert gr.load_saved_model(model_dir).session.run("restore:0") == np.float32(7.0)
    assert gr.Session(gr.load_graph(model_dir)).run("restore:0") == np.float32(7.0)


def test_a_graph_files_root_is_the_file_itself(model_dir):
    write_bundle(str(model_dir / "vars"), {"w": np.array(7.0, np.float32)})
    graph = gr.load_graph(_graph_file(model_dir / "g.pb", _restore_nodes("vars")))
    with pytest.raises(FileAccessError, match="outside the model .*g.pb"):
        gr.Session(graph).run("restore:0")
    assert gr.Session(graph, allow_files=[model_dir]).run("restore:0") == np.float32(7.0)


def test_restore_op_reads_through_a_link_only_if_it_stays_inside(model_dir, outside):
    _saved_model(model_dir, _restore_nodes("link/secret") + 'node { name: "init" op: "NoOp" }')
    os.symlink(outside, model_dir / "link")
    with pytest.raises(FileAccessError, match="outside the model"):
        gr.load_saved_model(model_dir).session.run("restore:0")
    granted = gr.load_saved_model(model_dir, allow_files=[outside])
    assert granted.session.run("restore:0") == np.float32(1234.5)


def test_restore_op_refuses_a_hard_link_inside_the_model(model_dir, outside):
    _saved_model(model_dir, _restore_nodes("vars") + 'node { name: "init" op: "NoOp" }')
    write_bundle(str(model_dir / "vars"), {"w": np.array(7.0, np.float32)})
    os.unlink(model_dir / "vars.data-00000-of-00001")
    os.link(outside / "secret.data-00000-of-00001", model_dir / "vars.data-00000-of-00001")
    with pytest.raises(FileAccessError, match="hard links"):
        gr.load_saved_model(model_dir).session.run("restore:0")


def test_merge_op_cannot_delete_or_read_outside(model_dir, outside, capsys):
    path = _graph_file(model_dir / "g.pb", _merge_nodes([str(outside / "secret")], str(model_dir / "merged")))
    before = _snapshot(outside)
    with pytest.raises(FileAccessError, match=r"node 'merge' \(op MergeV2Checkpoints\) deletes"):
        gr.Session(gr.load_graph(path)).run("merge")
    assert _snapshot(outside) == before
    assert sorted(os.listdir(model_dir)) == ["g.pb"]


def test_merge_op_runs_inside_a_granted_directory(tmp_path):
    run = tmp_path / "run"
    write_bundle(str(run / "part0"), {"a": np.arange(3, dtype=np.float32)})
    write_bundle(str(run / "part1"), {"b": np.ones(2, np.int64)})
    graph = gr.load_graph(_graph_file(tmp_path / "g.pb", _merge_nodes(["run/part0", "run/part1"], "run/all")))
    gr.Session(graph, allow_files=[run]).run("merge")
    reader = BundleReader(str(run / "all"))
    np.testing.assert_array_equal(reader.read("a"), np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(reader.read("b"), np.ones(2, np.int64))
    assert sorted(os.listdir(run)) == ["all.data-00000-of-00001", "all.index"]


def test_graph_built_in_python_gets_no_write_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    graph = gr.Graph()
    with graph.as_default():
        gr.raw_ops.SaveV2(prefix="ckpt", tensor_names=["w"], shape_and_slices=[""],
                          tensors=[gr.constant(1.0)], name="save")
    with pytest.raises(FileAccessError, match="none is"):
        gr.Session(graph).run("save")
    monkeypatch.setattr(config, "allow_files", [str(tmp_path)])
    gr.Session(graph).run("save")
    assert BundleReader(str(tmp_path / "ckpt")).read("w") == np.float32(1.0)


def test_only_declared_ops_get_a_path():
    """A kernel can touch files only through ctx.file_path, for a verb its op type declares."""
    graph = gr.Graph()
    with graph.as_default():
        neg = gr.negative(gr.constant(1.0), name="neg")
    context = gr.Session(graph).context
    with pytest.raises(FileAccessError, match="does not declare"):
        context.file_path(neg.op, "/tmp/x", "read")


# -- 2. a SavedModel's init op ------------------------------------------------------------------
def _saved_model(directory: pathlib.Path, init_nodes: str) -> pathlib.Path:
    text = f"""
    saved_model_schema_version: 1
    meta_graphs {{
      meta_info_def {{ tags: "serve" }}
      graph_def {{
        node {{ name: "x" op: "Placeholder" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }} }}
        node {{ name: "y" op: "Neg" input: "x" attr {{ key: "T" value {{ type: DT_FLOAT }} }} }}
        {init_nodes}
      }}
      signature_def {{ key: "__saved_model_init_op" value {{
        outputs {{ key: "__saved_model_init_op" value {{ name: "init" }} }} }} }}
      signature_def {{ key: "serving_default" value {{
        inputs {{ key: "x" value {{ name: "x:0" dtype: DT_FLOAT tensor_shape {{ unknown_rank: true }} }} }}
        outputs {{ key: "y" value {{ name: "y:0" dtype: DT_FLOAT tensor_shape {{ unknown_rank: true }} }} }}
        method_name: "tensorflow/serving/predict" }} }}
    }}"""
    directory.mkdir(exist_ok=True)
    proto = text_format.Parse(text, saved_model_pb2.SavedModel())
    (directory / "saved_model.pb").write_bytes(proto.SerializeToString())
    return directory


def test_inspect_runs_no_op_of_a_saved_model(model_dir, outside, capsys):
    _saved_model(model_dir, _save_nodes(str(outside / "written"))
                 + _merge_nodes([str(outside / "secret")], str(outside / "merged"))
                 + 'node { name: "init" op: "NoOp" input: "^save" input: "^merge" }')
    before = _snapshot(outside)
    for command in (["inspect", model_dir], ["inspect", model_dir, "--json"], ["check", model_dir],
                    ["view", model_dir, "-o", model_dir.parent / "v.dot"]):
        code, err = _cli(command, capsys)
        assert code == 0, (command, err)
        assert _snapshot(outside) == before, command
    model = gr.load_saved_model(model_dir, run_init_op=False)
    assert model.signatures["serving_default"](x=np.float32(2.0))["y"] == np.float32(-2.0)
    assert _snapshot(outside) == before


def test_run_confines_the_init_op(model_dir, outside, capsys):
    _saved_model(model_dir, _save_nodes(str(outside / "written"))
                 + 'node { name: "init" op: "NoOp" input: "^save" }')
    before = _snapshot(outside)
    with pytest.raises(FileAccessError, match="writes"):
        gr.load_saved_model(model_dir)
    code, err = _cli(["run", model_dir, "--feed", "x=2.0"], capsys)
    assert code == 1
    _one_line(err, "SaveV2", "--allow-files")
    assert _snapshot(outside) == before


def test_init_op_reading_an_outside_bundle_is_refused(model_dir, outside, capsys):
    _saved_model(model_dir, _restore_nodes(str(outside / "secret"))
                 + 'node { name: "init" op: "NoOp" input: "^restore" }')
    for command in (["run", model_dir, "--feed", "x=2.0"], ["freeze", model_dir, "-o", model_dir.parent / "f.pb"],
                    ["grad", model_dir, "--ys", "y", "--xs", "x", "--feed", "x=2.0"]):
        code, err = _cli(command, capsys)
        assert code == 1, command
        _one_line(err, "RestoreV2", "reads")
    assert not (model_dir.parent / "f.pb").exists()


# -- 3. links out of a SavedModel ---------------------------------------------------------------
def _copy_module(tmp_path) -> pathlib.Path:
    target = tmp_path / "module"
    shutil.copytree(SAVED_MODULE, target)
    return target


def test_linked_variables_directory_is_refused(tmp_path, capsys):
    model = _copy_module(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(model / "variables", elsewhere)
    os.symlink(elsewhere, model / "variables")
    with pytest.raises(FileAccessError, match="outside the model"):
        gr.load_saved_model(model)
    code, err = _cli(["inspect", model], capsys)
    assert code == 1
    _one_line(err, "variables")
    assert gr.load_saved_model(model, allow_files=[elsewhere]).variables    # granted: read through the link


def test_saved_model_pb_linked_out_is_refused(tmp_path, outside):
    model = tmp_path / "m"
    model.mkdir()
    shutil.copy(SAVED_MODULE / "saved_model.pb", outside / "saved_model.pb")
    os.symlink(outside / "saved_model.pb", model / "saved_model.pb")
    with pytest.raises(FileAccessError):
        gr.load_saved_model(model)


def test_save_never_writes_through_a_linked_variables_directory(tmp_path):
    model = _copy_module(tmp_path)
    loaded = gr.load_saved_model(model)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(model / "variables", elsewhere)
    os.symlink(elsewhere, model / "variables")
    before = _snapshot(elsewhere)
    with pytest.raises(FileAccessError):
        loaded.save()
    assert _snapshot(elsewhere) == before


def test_copy_refuses_an_asset_linked_out(tmp_path, outside):
    model = _copy_module(tmp_path)
    (model / "assets").mkdir()
    os.symlink(outside / "precious.txt", model / "assets" / "vocab.txt")
    with pytest.raises(FileAccessError, match="vocab.txt"):
        gr.load_saved_model(model).save(tmp_path / "copy")
    assert not (tmp_path / "copy" / "assets" / "vocab.txt").exists()


def test_copy_keeps_assets_inside(tmp_path):
    model = _copy_module(tmp_path)
    (model / "assets").mkdir()
    (model / "assets" / "vocab.txt").write_text("a\nb\n")
    copy = gr.load_saved_model(model).save(tmp_path / "copy")
    assert (pathlib.Path(copy) / "assets" / "vocab.txt").read_text() == "a\nb\n"


def test_write_variables_into_a_target_whose_variables_link_out(tmp_path):
    model = _copy_module(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, target / "variables")
    with pytest.raises(FileAccessError):
        write_saved_model_variables(str(model), {}, str(target))
    assert os.listdir(elsewhere) == []


# -- 4. checkpoint state files ------------------------------------------------------------------
def _tf_checkpoint_dir(tmp_path, name="run") -> pathlib.Path:
    run = tmp_path / name
    shutil.copytree(TF1_CHECKPOINTS, run)
    return run


@pytest.mark.parametrize("named", ["absolute", "dotdot"])
def test_state_file_cannot_send_a_restore_outside(tmp_path, outside, named):
    run = _tf_checkpoint_dir(tmp_path)
    target = str(outside / "secret") if named == "absolute" else "../outside/secret"
    (run / "checkpoint").write_text(f'model_checkpoint_path: "{target}"\n')
    with pytest.raises(FileAccessError, match="outside"):
        tf_checkpoint.latest_checkpoint(str(run))
    with pytest.raises(FileAccessError):
        tf_checkpoint.load_checkpoint(str(run))


def test_state_file_of_a_moved_directory_names_its_own_files(tmp_path):
    """TensorFlow 1 writes absolute paths: after the directory moved, the file of that name inside."""
    run = _tf_checkpoint_dir(tmp_path)
    (run / "checkpoint").write_text('model_checkpoint_path: "/old/place/model.ckpt-2"\n')
    assert tf_checkpoint.latest_checkpoint(str(run)) == str(run / "model.ckpt-2")


def test_saver_cleanup_never_deletes_what_the_state_file_names_outside(tmp_path, outside):
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside / "secret.index", run / "linked.index")
    (run / "checkpoint").write_text(
        f'model_checkpoint_path: "{outside}/secret"\nall_model_checkpoint_paths: "{outside}/secret"\n'
        f'all_model_checkpoint_paths: "../outside/secret"\nall_model_checkpoint_paths: "linked"\n')
    before = _snapshot(outside)
    for step in range(3):
        tf_checkpoint.save_checkpoint(str(run / "model.ckpt"), {"w": np.float32(step)}, step, max_to_keep=1)
    assert _snapshot(outside) == before
    assert tf_checkpoint.latest_checkpoint(str(run)) == str(run / "model.ckpt-2")
    assert not (run / "model.ckpt-0.index").exists()       # its own old checkpoints are removed


def test_gradreg_saver_index_cannot_name_outside_files(tmp_path, outside):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint").write_text(json.dumps({"latest": "../outside/precious.txt",
                                                "all": [str(outside / "precious.txt"), "../outside/precious.txt"]}))
    graph = gr.Graph()
    with graph.as_default():
        v = gr.Variable(np.float32(1.0), name="v")
    session = gr.Session(graph)
    session.run(v.initializer)
    saver = gr.train.Saver(max_to_keep=1)
    for step in range(3):
        saver.save(session, str(run / "model"), global_step=step)
    assert (outside / "precious.txt").read_text() == "do not touch"
    assert gr.train.latest_checkpoint(str(run)) == str(run / "model-2.npz")


@pytest.mark.parametrize("link", ["checkpoint", "model-0.npz"])
def test_gradreg_saver_never_writes_through_a_link_in_its_directory(tmp_path, outside, link):
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside / "precious.txt", run / link)
    graph = gr.Graph()
    with graph.as_default():
        v = gr.Variable(np.float32(1.0), name="v")
    session = gr.Session(graph)
    session.run(v.initializer)
    with pytest.raises(FileAccessError, match=link):
        gr.train.Saver().save(session, str(run / "model"), global_step=0)
    assert (outside / "precious.txt").read_text() == "do not touch"


@pytest.mark.parametrize("link", ["checkpoint", "model.ckpt-0.index", "model.ckpt-0.data-00000-of-00001"])
def test_tf_saver_never_writes_through_a_link_in_its_directory(tmp_path, outside, link):
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside / "precious.txt", run / link)
    with pytest.raises(FileAccessError, match="precious"):
        tf_checkpoint.save_checkpoint(str(run / "model.ckpt"), {"w": np.float32(1.0)}, 0)
    assert (outside / "precious.txt").read_text() == "do not touch"
    assert sorted(os.listdir(run)) == [link]       # nothing half-written


def test_cli_checkpoint_directory_whose_state_file_leads_out(tmp_path, outside, capsys):
    run = _tf_checkpoint_dir(tmp_path)
    (run / "checkpoint").write_text('model_checkpoint_path: "../../outside/secret"\n')
    graph = tmp_path / "g.pb"
    graph.write_bytes(text_format.Parse(GLOBAL_STEP, graph_pb2.GraphDef()).SerializeToString())
    code, err = _cli(["run", graph, "--checkpoint", run, "--fetch", "read"], capsys)
    assert code == 1
    _one_line(err, "checkpoint", "outside")


GLOBAL_STEP = ('node { name: "global_step" op: "VariableV2" attr { key: "dtype" value { type: DT_INT64 } } '
               'attr { key: "shape" value { shape {} } } }\n'
               'node { name: "read" op: "Identity" input: "global_step" attr { key: "T" value { type: DT_INT64 } } }\n')


# -- 6. internal errors -------------------------------------------------------------------------
def test_deeply_nested_text_saved_model_is_a_saved_model_error(tmp_path):
    model = tmp_path / "deep"
    model.mkdir()
    depth = 5000
    (model / "saved_model.pbtxt").write_text("meta_graphs { " * depth + "}" * depth)
    with pytest.raises(SavedModelError, match="nested 5000 deep"):
        gr.load_saved_model(model)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage\x80", b"model_checkpoint_path: 3 {", b"x" * (2 << 20)])
def test_garbage_state_file_is_a_checkpoint_error(tmp_path, content, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint").write_bytes(content)
    with pytest.raises(CheckpointError, match="not a TensorFlow checkpoint state file"):
        tf_checkpoint.latest_checkpoint(str(run))


def test_npz_checkpoint_with_object_arrays_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "model-1.npz"
    np.savez(path, v=np.array([{"a": 1}], dtype=object),
             __gradreg_checkpoint__=np.array(json.dumps({"format": "gradreg-checkpoint", "version": 1,
                                                         "variables": {"v": {"dtype": "float32", "shape": []}}})))
    graph = gr.Graph()
    with graph.as_default():
        v = gr.Variable(np.float32(1.0), name="v")
    session = gr.Session(graph)
    session.run(v.initializer)
    with pytest.raises(CheckpointError, match="Python objects"):
        gr.train.Saver([v]).restore(session, str(path))


@pytest.mark.parametrize("meta", ["not json", json.dumps([1, 2]), json.dumps({"format": "gradreg-checkpoint",
                                                                              "version": 1, "variables": 3})])
def test_npz_checkpoint_with_garbage_metadata_is_a_checkpoint_error(tmp_path, meta):
    path = tmp_path / "model-1.npz"
    np.savez(path, v=np.float32(2.0), __gradreg_checkpoint__=np.array(meta))
    graph = gr.Graph()
    with graph.as_default():
        v = gr.Variable(np.float32(1.0), name="v")
    session = gr.Session(graph)
    with pytest.raises(CheckpointError):
        gr.train.Saver([v]).restore(session, str(path))



# -- 3 (of the trust model): nothing from the file executes; file ops are declared facts --------
PLUGINS = pathlib.Path(__file__).resolve().parent.parent / "plugins" / "gradreg_plugins"
# Calls and imports that touch files, run programs, load code or reach the network.
_CALLS = {"open", "eval", "exec", "compile", "__import__", "BundleReader", "write_bundle", "atomic_write",
          "atomic_write_all"}
_OS = {"open", "unlink", "remove", "rmdir", "rename", "replace", "makedirs", "mkdir", "listdir", "scandir", "walk",
       "symlink", "link", "chmod", "system", "popen", "execv", "execvp", "spawnl", "fork"}
_NUMPY = {"load", "save", "savez", "savez_compressed", "fromfile", "memmap", "loadtxt", "genfromtxt", "savetxt",
          "tofile"}
_MODULES = {"shutil", "subprocess", "socket", "urllib", "pickle", "requests", "http", "ctypes", "importlib",
            "marshal", "shelve", "tempfile", "multiprocessing"}
# Each module of the op families allowed such code, and why. A new one fails the test below: declare
# the op's files= and use ctx.file_path (or say here why the code is not the model's doing).
ALLOWED = {
    "training/checkpoint_ops.py": "the file ops (SaveV2, RestoreV2, MergeV2Checkpoints): every path through "
                                  "ctx.file_path, for the verbs their definitions declare",
    "_lazy.py": "importlib imports gradreg's own family modules by their fixed names",
    "onnx/reference_kernels.py": "importlib imports onnx.reference's op modules by gradreg's table, not the file's",
    "math/blas.py": "ctypes calls the BLAS NumPy links",
    "random/libm.py": "reads its own table shipped in the package (glibc_f32.npz)",
    "random/make_libm_tables.py": "a developer's tool that regenerates that table",
    "onnx/format.py": "writes the ONNX file the caller named (save_onnx, gradreg convert -o)",
    "onnx/generate_schema_table.py": "a developer's tool that regenerates the schema table",
}


def _reaching_calls(path: pathlib.Path) -> list[str]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {node.lineno}: import {n}" for n in names if n.split(".")[0] in _MODULES]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in _CALLS:
                found.append(f"line {node.lineno}: {func.id}()")
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
                    (func.value.id == "os" and func.attr in _OS) or (func.value.id in ("np", "numpy")
                                                                      and func.attr in _NUMPY)):
                found.append(f"line {node.lineno}: {func.value.id}.{func.attr}()")
    return found


def test_only_declared_modules_of_the_op_families_touch_files_or_run_code():
    found = {}
    for path in sorted(PLUGINS.rglob("*.py")):
        calls = _reaching_calls(path)
        if calls:
            found[path.relative_to(PLUGINS).as_posix()] = calls
    unexpected = {module: calls for module, calls in found.items() if module not in ALLOWED}
    assert not unexpected, f"code that touches files, runs programs or loads code: {unexpected}"


def test_the_file_ops_declare_what_they_do():
    from gradreg.registry import get_registry

    registry = get_registry()
    definitions = {name: registry.op_definition(name) for name in registry.ops}
    declared = {name: tuple(d.files) for name, d in definitions.items() if d is not None and d.files}
    assert declared == {"RestoreV2": ("read",), "SaveV2": ("write", "delete"),
                        "MergeV2Checkpoints": ("read", "write", "delete")}


# -- found by the fuzzer ------------------------------------------------------------------------
@pytest.fixture
def no_hang():
    """Fail instead of blocking forever (a FIFO opened for reading waits for a writer)."""
    import signal

    def expire(signum, frame):
        raise TimeoutError("blocked")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name", ["variables/variables.index", "variables/variables.data-00000-of-00001",
                                  "saved_model.pb"])
def test_a_fifo_in_a_saved_model_is_refused_not_waited_on(tmp_path, no_hang, name):
    model = _copy_module(tmp_path)
    os.unlink(model / name)
    os.mkfifo(model / name)
    with pytest.raises((FileAccessError, SavedModelError), match="FIFO|not a SavedModel"):
        gr.load_saved_model(model)


def test_a_fifo_beside_a_directory_that_is_no_saved_model(tmp_path, no_hang):
    place = tmp_path / "not_a_model"
    place.mkdir()
    os.mkfifo(place / "model.pb")
    with pytest.raises(SavedModelError, match="not a SavedModel"):
        gr.load_saved_model(place)


def test_a_fifo_state_file_or_meta_file_is_refused(tmp_path, no_hang):
    run = _tf_checkpoint_dir(tmp_path)
    os.unlink(run / "checkpoint")
    os.mkfifo(run / "checkpoint")
    with pytest.raises(FileAccessError, match="FIFO"):
        tf_checkpoint.latest_checkpoint(str(run))
    os.unlink(run / "model.ckpt-3.meta")
    os.mkfifo(run / "model.ckpt-3.meta")
    with pytest.raises(FileAccessError, match="FIFO"), gr.Graph().as_default():
        gr.train.import_meta_graph(str(run / "model.ckpt-3.meta"))


def test_a_graph_file_that_is_a_device_is_refused(tmp_path):
    os.symlink("/dev/zero", tmp_path / "g.pb")
    with pytest.raises(FileAccessError, match="character device"):
        gr.load_graph(tmp_path / "g.pb")


def test_a_corrupt_variable_def_names_the_saved_model(tmp_path):
    model = tmp_path / "tf1"
    shutil.copytree(DATA / "saved_model_io" / "tf1_model", model)
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((model / "saved_model.pb").read_bytes())
    for entry in proto.meta_graphs[0].collection_def:
        if entry.key == "variables":
            entry.value.bytes_list.value[0] = b"\xff\xff\xff"
    (model / "saved_model.pb").write_bytes(proto.SerializeToString())
    with pytest.raises(SavedModelError, match="tf1: a VariableDef .* is corrupt"):
        gr.load_saved_model(model)


def test_a_signature_or_variable_with_no_data_type_names_the_saved_model(tmp_path, capsys):
    model = _copy_module(tmp_path)
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((model / "saved_model.pb").read_bytes())
    meta = proto.meta_graphs[0]
    serving = next(e.value for e in meta.signature_def if e.key == "serving_default")
    serving.outputs[0].value.dtype = 99
    (model / "saved_model.pb").write_bytes(proto.SerializeToString())
    with pytest.raises(SavedModelError, match="signature 'serving_default' output .* declares dtype 99"):
        gr.load_saved_model(model)
    code, err = _cli(["inspect", model], capsys)
    assert code == 1
    _one_line(err, "module", "dtype 99")


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_checkpoint_file_linked_out_of_its_directory_is_refused(tmp_path, outside, link, monkeypatch):
    """Found by the fuzzer: the data of a TensorFlow checkpoint directory hard-linked to a bundle
    outside brought the outside values back."""
    run = _tf_checkpoint_dir(tmp_path)
    write_bundle(str(outside / "model.ckpt-3"), tf_checkpoint.load_checkpoint(str(run / "model.ckpt-3")))
    for name in ("model.ckpt-3.index", "model.ckpt-3.data-00000-of-00001"):
        os.unlink(run / name)
        (os.link if link == "hard" else os.symlink)(outside / name, run / name)
    with pytest.raises(FileAccessError, match="hard links" if link == "hard" else "outside the model"):
        tf_checkpoint.load_checkpoint(str(run))
    # Granted, the same read goes through: the outside directory for a symbolic link (it resolves
    # there), the checkpoint's own directory for a hard link (no path leads elsewhere).
    monkeypatch.setattr(config, "allow_files", [str(outside if link == "symbolic" else run)])
    assert "global_step" in tf_checkpoint.load_checkpoint(str(run))


def _npz_with(tmp_path, name: str, encrypted: bool = False):
    """An .npz whose one member is called ``name`` (flagged encrypted, if asked)."""
    import zipfile
    path = tmp_path / "feeds.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo(name), b"not an array")
    raw = bytearray(path.read_bytes())
    if encrypted:
        raw[6] |= 1                                       # the local header's flag bits
        central = raw.find(b"PK\x01\x02")
        raw[central + 8] |= 1                             # and the central directory's
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("name, encrypted, message", [
    ("x.npy", True, "member 'x.npy' is encrypted"),       # zipfile raised RuntimeError (the fuzzer's find)
    ("", False, "a member without a name"),               # zipfile's is_dir raised IndexError
])
def test_npz_members_zipfile_cannot_read_are_feed_errors(tmp_path, name, encrypted, message):
    from gradreg.formats.arrays import read_npz
    path = _npz_with(tmp_path, name, encrypted)
    with pytest.raises(FeedError, match=message):
        read_npz(str(path))
