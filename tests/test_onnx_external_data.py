"""ONNX external data: every tensor stored in another file is read from the model's directory,
and a location that would read anything else is refused (issue 27, point 5).

The models and their data files are written by the tests: legitimate ones (dense and sparse
initializers, Constant ``value``/``sparse_value``, subgraph initializers, model-local functions)
load from another working directory to the values written; hostile ones mirror onnx's
external-data advisories (CVE-2022-25882's traversal, CVE-2024-27318's, and their symlink and
hardlink bypasses) and are refused with an ExternalDataError naming the model and the tensor.
"""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import gradreg as gr  # noqa: E402
from gradreg import cli  # noqa: E402
from gradreg.errors import ExternalDataError, GraphFileError  # noqa: E402

F = TensorProto.FLOAT
tvi = helper.make_tensor_value_info
W = np.arange(6, dtype=np.float32).reshape(2, 3) + 0.5


def external(array: np.ndarray, name: str, directory, location: str, *, offset: int = 0,
             length: int | None = None, write: bool = True) -> TensorProto:
    """A TensorProto of ``array`` whose bytes are at ``location`` (relative to ``directory``),
    written there at ``offset`` unless ``write`` is False."""
    tensor = numpy_helper.from_array(array, name)
    raw = tensor.raw_data
    if write:
        path = os.path.join(str(directory), location)
        with open(path, "ab") as f:
            f.write(b"\0" * (offset - f.tell()) if offset > f.tell() else b"")
            f.write(raw)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": offset, "length": len(raw) if length is None else length}
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
    return tensor


def add_model(initializers=(), sparse=(), nodes=None, functions=()):
    """y = x + w, with w an initializer, a sparse initializer or the output of ``nodes``."""
    nodes = nodes if nodes is not None else [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [tvi("x", F, [2, 3])], [tvi("y", F, [2, 3])],
                              initializer=list(initializers), sparse_initializer=list(sparse))
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions))


def sparse_w(directory, values_location: str, indices_location: str) -> onnx.SparseTensorProto:
    """W as a sparse tensor (its nonzeros by linear index), values and indices in external data."""
    flat = W.reshape(-1)
    keep = np.flatnonzero(flat)
    values = external(flat[keep], "w", directory, values_location)
    indices = external(keep.astype(np.int64), "w_indices", directory, indices_location)
    return helper.make_sparse_tensor(values, indices, list(W.shape))


def save(model, path) -> str:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return str(path)


def run_add(graph) -> np.ndarray:
    x = np.ones((2, 3), np.float32)
    return gr.Session(graph).run("y", {"x": x}) - x


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory that is not the model's (holding decoys of the data files)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture
def model_dir(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    return directory


# -- legitimate models, loaded from another working directory ----------------------------------------

def test_a_dense_initializer_in_external_data_loads_from_the_model_directory(model_dir, elsewhere):
    path = save(add_model([external(W, "w", model_dir, "w.bin")]), model_dir / "m.onnx")
    np.testing.assert_array_equal(run_add(gr.load_graph(path)), W)


def test_a_sparse_initializer_in_external_data_loads_from_another_working_directory(model_dir, elsewhere):
    (elsewhere / "values.bin").write_bytes(b"\x00" * 64)   # a decoy where the old reader looked
    path = save(add_model(sparse=[sparse_w(model_dir, "values.bin", "indices.bin")]), model_dir / "m.onnx")
    np.testing.assert_array_equal(run_add(gr.load_onnx(path)), W)


def test_a_constant_sparse_value_in_external_data_loads_from_the_model_directory(model_dir, elsewhere):
    constant = helper.make_node("Constant", [], ["w"], name="c", sparse_value=sparse_w(model_dir, "v.bin", "i.bin"))
    add = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    path = save(add_model(nodes=[constant, add]), model_dir / "m.onnx")
    np.testing.assert_array_equal(run_add(gr.load_graph(path)), W)


def test_a_constant_value_in_external_data_loads_from_the_model_directory(model_dir, elsewhere):
    constant = helper.make_node("Constant", [], ["w"], name="c", value=external(W, "cw", model_dir, "c.bin"))
    add = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    path = save(add_model(nodes=[constant, add]), model_dir / "m.onnx")
    np.testing.assert_array_equal(run_add(gr.load_graph(path)), W)


def if_model(model_dir, then_initializer=None, then_sparse=None):
    """y = If(cond) then (x + w, w in the branch's initializers) else x."""
    then = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then_branch", [],
                             [tvi("t", F, [2, 3])],
                             initializer=[then_initializer] if then_initializer is not None else [],
                             sparse_initializer=[then_sparse] if then_sparse is not None else [])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else_branch", [], [tvi("e", F, [2, 3])])
    node = helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=other)
    graph = helper.make_graph([node], "g", [tvi("x", F, [2, 3]), tvi("cond", TensorProto.BOOL, [])],
                              [tvi("y", F, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_a_subgraph_initializer_in_external_data_loads_from_the_model_directory(model_dir, elsewhere, kind):
    if kind == "dense":
        model = if_model(model_dir, then_initializer=external(W, "w", model_dir, "w.bin"))
    else:
        model = if_model(model_dir, then_sparse=sparse_w(model_dir, "v.bin", "i.bin"))
    graph = gr.load_graph(save(model, model_dir / "m.onnx"))
    x = np.ones((2, 3), np.float32)
    sess = gr.Session(graph)
    np.testing.assert_array_equal(sess.run("y", {"x": x, "cond": np.array(True)}), x + W)
    np.testing.assert_array_equal(sess.run("y", {"x": x, "cond": np.array(False)}), x)


def test_a_constant_in_a_model_local_function_loads_from_the_model_directory(model_dir, elsewhere):
    body = [helper.make_node("Constant", [], ["w"], value=external(W, "fw", model_dir, "f.bin")),
            helper.make_node("Add", ["a", "w"], ["b"])]
    function = helper.make_function("local", "AddW", ["a"], ["b"], body, [helper.make_opsetid("", 18)])
    call = helper.make_node("AddW", ["x"], ["y"], name="call", domain="local")
    path = save(add_model(nodes=[call], functions=[function]), model_dir / "m.onnx")
    np.testing.assert_array_equal(run_add(gr.load_graph(path)), W)


def test_bytes_with_external_data_need_a_base_directory_naming_the_tensor(model_dir, elsewhere):
    model = add_model(sparse=[sparse_w(model_dir, "values.bin", "indices.bin")])
    with pytest.raises(ExternalDataError, match=r"<bytes>: the values of sparse initializer 'w'.*base_dir"):
        gr.load_onnx(model.SerializeToString())
    with pytest.raises(ExternalDataError, match=r"sparse initializer 'w'.*base_dir"):
        gr.load_onnx(model)          # a ModelProto carries no directory either
    np.testing.assert_array_equal(run_add(gr.load_onnx(model.SerializeToString(), base_dir=model_dir)), W)
    np.testing.assert_array_equal(run_add(gr.load_onnx(model, base_dir=str(model_dir))), W)
    assert model.graph.sparse_initializer[0].values.data_location == TensorProto.EXTERNAL   # the caller's, unchanged


def test_a_data_file_only_in_the_working_directory_is_not_read(model_dir, elsewhere):
    model = add_model([external(W, "w", elsewhere, "w.bin")])   # written to the cwd, not beside the model
    path = save(model, model_dir / "m.onnx")
    with pytest.raises(ExternalDataError, match=r"m\.onnx: initializer 'w'.*'w\.bin'.*not a regular file"):
        gr.load_graph(path)


# -- hostile locations ----------------------------------------------------------------------------------

@pytest.fixture
def secret(tmp_path):
    """A file outside the model's directory holding W's bytes (what an attacker wants read)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "secret.bin"
    path.write_bytes(numpy_helper.from_array(W).raw_data)
    return path


def hostile(model_dir, location: str, **kwargs) -> str:
    return save(add_model([external(W, "w", model_dir, location, write=False, **kwargs)]), model_dir / "m.onnx")


def assert_refused(path: str, pattern: str) -> None:
    with pytest.raises(ExternalDataError, match=rf"m\.onnx: initializer 'w'.*{pattern}"):
        gr.load_graph(path)


def test_a_traversal_location_is_refused(model_dir, secret):
    assert_refused(hostile(model_dir, "../outside/secret.bin"), r"'\.\.' component")


def test_a_dotdot_that_comes_back_inside_is_refused_too(model_dir):
    external(W, "w", model_dir, "w.bin")
    assert_refused(hostile(model_dir, "sub/../w.bin"), r"'\.\.' component")


def test_an_absolute_location_is_refused(model_dir, secret):
    assert_refused(hostile(model_dir, str(secret)), "is absolute")


def test_a_symlink_to_a_file_outside_is_refused(model_dir, secret):
    os.symlink(secret, model_dir / "w.bin")
    assert_refused(hostile(model_dir, "w.bin"), "symbolic link")


def test_a_hardlink_to_a_file_outside_is_refused(model_dir, secret):
    os.link(secret, model_dir / "w.bin")
    assert_refused(hostile(model_dir, "w.bin"), "hard links")


def test_a_symlinked_directory_leading_outside_is_refused(model_dir, secret):
    os.symlink(secret.parent, model_dir / "data")
    assert_refused(hostile(model_dir, "data/secret.bin"), "outside the model's directory")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_without_blocking(model_dir):
    os.mkfifo(model_dir / "w.bin")
    assert_refused(hostile(model_dir, "w.bin"), "not a regular file")


def test_a_device_is_refused(model_dir):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    os.symlink("/dev/zero", model_dir / "w.bin")
    assert_refused(hostile(model_dir, "w.bin"), "symbolic link")


@pytest.mark.parametrize(("offset", "length", "pattern"), [
    (1000, None, r"offset \(1000\) exceeds file size \(24\)"),
    (0, 1000, r"length \(1000\) exceeds available data"),
    (16, 24, r"length \(24\) exceeds available data \(8 bytes from offset 16\)"),
])
def test_an_offset_or_length_past_the_end_of_the_file_is_refused(model_dir, offset, length, pattern):
    (model_dir / "w.bin").write_bytes(numpy_helper.from_array(W).raw_data)   # 24 bytes
    tensor = external(W, "w", model_dir, "w.bin", write=False)
    entries = {e.key: e for e in tensor.external_data}
    entries["offset"].value = str(offset)
    entries["length"].value = str(length if length is not None else 24)
    path = save(add_model([tensor]), model_dir / "m.onnx")
    assert_refused(path, pattern)


def test_a_hostile_sparse_initializer_in_a_subgraph_is_refused(model_dir, secret):
    values = external(W.reshape(-1), "w", model_dir, "../outside/secret.bin", write=False)
    indices = numpy_helper.from_array(np.arange(6, dtype=np.int64), "w_indices")
    model = if_model(model_dir, then_sparse=helper.make_sparse_tensor(values, indices, [2, 3]))
    path = save(model, model_dir / "m.onnx")
    with pytest.raises(ExternalDataError, match=r"values of sparse initializer 'w' in subgraph 'then_branch' "
                                                r"of node 'branch'.*'\.\.' component"):
        gr.load_graph(path)


def test_a_hostile_constant_sparse_value_is_refused(model_dir, secret):
    values = external(W.reshape(-1), "w", model_dir, str(secret), write=False)
    indices = numpy_helper.from_array(np.arange(6, dtype=np.int64), "w_indices")
    constant = helper.make_node("Constant", [], ["w"], name="c",
                                sparse_value=helper.make_sparse_tensor(values, indices, [2, 3]))
    path = save(add_model(nodes=[constant, helper.make_node("Add", ["x", "w"], ["y"])]), model_dir / "m.onnx")
    with pytest.raises(ExternalDataError, match=r"attribute 'sparse_value' of node 'c' \(op Constant\).*absolute"):
        gr.load_graph(path)


def test_the_command_line_refuses_with_one_line_and_exit_1(model_dir, secret, capsys):
    path = hostile(model_dir, "../outside/secret.bin")
    for command in (["inspect", path], ["run", path, "--fetch", "y", "--feed", "x=1"]):
        code = cli.main(command)
        out, err = capsys.readouterr()
        assert code == 1, command
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "m.onnx" in err and "initializer 'w'" in err and "'..' component" in err


def test_external_data_error_is_a_graph_file_error():
    assert issubclass(ExternalDataError, GraphFileError)
