"""SavedModel protos wire-compatible with TensorFlow's, SavedModel directories read without
TensorFlow, their variables mapped to checkpoint keys and rewritten, other model files named.

Fixtures: tests/data/checkpoints (written by TensorFlow and Keras, make_reference.py).
"""
from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest
from google.protobuf import text_format, unknown_fields

from gradreg import load_graph
from gradreg.errors import CheckpointError, GraphFileError, SavedModelError, UnsupportedModelFormatError
from gradreg.formats import model_kinds, saved_model, sstable, tf_checkpoint
from gradreg.formats.tensor_bundle import BundleReader
from gradreg.model import dtypes
from gradreg.proto import (
    checkpoint_state_pb2,
    fingerprint_pb2,
    meta_graph_pb2,
    saved_model_pb2,
    saved_object_graph_pb2,
    saver_pb2,
    struct_pb2,
    tensor_bundle_pb2,
    tensor_slice_pb2,
    trackable_object_graph_pb2,
    variable_pb2,
)

DATA = pathlib.Path(__file__).parent / "data" / "checkpoints"
META = json.loads((DATA / "expected.json").read_text())
SAVED_MODELS = ["saved_module", "keras_export"]


def unknown_field_paths(message, path="") -> list[str]:
    """Where a parsed message kept bytes its descriptor does not know (there should be none)."""
    found = [path or message.DESCRIPTOR.full_name] if len(unknown_fields.UnknownFieldSet(message)) else []
    for field, value in message.ListFields():
        if field.message_type is not None:
            items = value if field.is_repeated else [value]
            for i, item in enumerate(items):
                found += unknown_field_paths(item, f"{path}.{field.name}[{i}]")
    return found


# -- wire compatibility with TensorFlow's files -------------------------------------------------
PROTO_FILES = [
    ("saved_module/saved_model.pb", saved_model_pb2.SavedModel),
    ("keras_export/saved_model.pb", saved_model_pb2.SavedModel),
    ("tf1/model.ckpt-3.meta", meta_graph_pb2.MetaGraphDef),
    ("saved_module/fingerprint.pb", fingerprint_pb2.FingerprintDef),
    ("keras_export/fingerprint.pb", fingerprint_pb2.FingerprintDef),
]


@pytest.mark.parametrize("name,message_type", PROTO_FILES, ids=[p for p, _ in PROTO_FILES])
def test_tensorflow_written_protos_reserialize_byte_identical(name, message_type):
    data = (DATA / name).read_bytes()
    message = message_type.FromString(data)
    assert message.SerializeToString() == data
    assert unknown_field_paths(message) == []


@pytest.mark.parametrize("prefix", ["saved_module/variables/variables", "keras_export/variables/variables",
                                    "object/ckpt-1", "sharded/ckpt", "tf1/model.ckpt-3"])
def test_index_entries_and_object_graphs_reserialize_byte_identical(prefix):
    for key, value in sstable.Table(str(DATA / (prefix + ".index"))).items():
        message_type = tensor_bundle_pb2.BundleHeaderProto if key == b"" else tensor_bundle_pb2.BundleEntryProto
        message = message_type.FromString(value)
        assert message.SerializeToString() == value and unknown_field_paths(message) == [], key
    reader = BundleReader(DATA / prefix)
    if tf_checkpoint.OBJECT_GRAPH_KEY in reader:
        data = reader.read(tf_checkpoint.OBJECT_GRAPH_KEY).item()
        graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(data)
        assert graph.SerializeToString() == data and unknown_field_paths(graph) == []


def test_saved_model_parts_parse_to_their_content():
    model = saved_model.read_saved_model(DATA / "saved_module")
    graph = saved_model.meta_graph(model)
    assert list(graph.meta_info_def.tags) == ["serve"]
    signatures = saved_model.signature_defs(graph)
    for name, info in META["saved_models"]["saved_module"]["signatures"].items():
        assert sorted(e.key for e in signatures[name].inputs) == info["inputs"]
        assert sorted(e.key for e in signatures[name].outputs) == info["outputs"]
    scale_inputs = {e.key: e.value for e in signatures["scale"].inputs}
    assert scale_inputs["v"].dtype == dtypes.float32.enum and scale_inputs["v"].name.endswith(":0")
    kinds = [node.WhichOneof("kind") for node in graph.object_graph_def.nodes]
    assert kinds.count("variable") == 4 and "function" in kinds
    assert len(graph.object_graph_def.concrete_functions) >= 2
    assert len(graph.graph_def.library.function) >= 2


def test_tf1_meta_graph_holds_saver_and_variable_collections():
    graph = meta_graph_pb2.MetaGraphDef.FromString((DATA / "tf1" / "model.ckpt-3.meta").read_bytes())
    assert graph.saver_def.version == saver_pb2.SaverDef.V2 and graph.saver_def.max_to_keep == 2
    collections = {e.key: e.value for e in graph.collection_def}
    names = [variable_pb2.VariableDef.FromString(v).variable_name for v in collections["variables"].bytes_list.value]
    assert "dense/kernel:0" in names and "global_step:0" in names
    partitioned = [variable_pb2.VariableDef.FromString(v) for v in collections["variables"].bytes_list.value
                   if variable_pb2.VariableDef.FromString(v).save_slice_info_def.full_name == "emb"]
    assert len(partitioned) == 3
    assert [list(v.save_slice_info_def.full_shape) for v in partitioned] == [[10, 3]] * 3


def test_checkpoint_state_text_round_trips():
    text = (DATA / "tf1" / "checkpoint").read_text()
    state = text_format.Parse(text, checkpoint_state_pb2.CheckpointState())
    assert state.model_checkpoint_path == "model.ckpt-3"
    again = text_format.Parse(text_format.MessageToString(state), checkpoint_state_pb2.CheckpointState())
    assert again == state


def test_tensor_slice_length_presence_survives_a_round_trip():
    piece = tensor_slice_pb2.TensorSliceProto()
    piece.extent.add(start=0)              # whole dimension: no length
    piece.extent.add(start=2, length=0)    # an empty range: length present
    again = tensor_slice_pb2.TensorSliceProto.FromString(piece.SerializeToString())
    assert [e.HasField("length") for e in again.extent] == [False, True]


def _in_real_oneof(field) -> bool:
    # A proto3 `optional` field (gradreg's map entry keys) sits in a synthetic one-field oneof.
    oneof = field.containing_oneof
    return oneof is not None and oneof.name != "_" + field.name


def _descriptor_differences(ours, theirs, seen=None) -> list[str]:
    """Field numbers, names, types, labels, packing, oneofs and enum values that differ."""
    seen = set() if seen is None else seen
    if ours.full_name in seen:
        return []
    seen.add(ours.full_name)
    out = []
    mine = {f.number: f for f in ours.fields}
    tfs = {f.number: f for f in theirs.fields}
    if set(mine) != set(tfs):
        out.append(f"{ours.full_name}: fields {sorted(mine)} vs TensorFlow's {sorted(tfs)}")
    for number in set(mine) & set(tfs):
        a, b = mine[number], tfs[number]
        wire_a = (a.name, a.type, a.is_repeated, a.is_packed, _in_real_oneof(a))
        wire_b = (b.name, b.type, b.is_repeated, b.is_packed, _in_real_oneof(b))
        if wire_a != wire_b:
            out.append(f"{ours.full_name}.{a.name}: {wire_a} vs {wire_b}")
        if a.message_type is not None:
            out += _descriptor_differences(a.message_type, b.message_type, seen)
        if a.enum_type is not None:
            values_a = {v.number: v.name for v in a.enum_type.values}
            values_b = {v.number: v.name for v in b.enum_type.values}
            if values_a != values_b:
                out.append(f"{a.enum_type.full_name}: {values_a} vs {values_b}")
    return out


TF_MODULES = {
    saved_model_pb2.SavedModel: "tensorflow.core.protobuf.saved_model_pb2",
    meta_graph_pb2.MetaGraphDef: "tensorflow.core.protobuf.meta_graph_pb2",
    saved_object_graph_pb2.SavedObjectGraph: "tensorflow.core.protobuf.saved_object_graph_pb2",
    trackable_object_graph_pb2.TrackableObjectGraph: "tensorflow.core.protobuf.trackable_object_graph_pb2",
    struct_pb2.StructuredValue: "tensorflow.core.protobuf.struct_pb2",
    tensor_bundle_pb2.BundleHeaderProto: "tensorflow.core.protobuf.tensor_bundle_pb2",
    tensor_bundle_pb2.BundleEntryProto: "tensorflow.core.protobuf.tensor_bundle_pb2",
    variable_pb2.VariableDef: "tensorflow.core.framework.variable_pb2",
    saver_pb2.SaverDef: "tensorflow.core.protobuf.saver_pb2",
    fingerprint_pb2.FingerprintDef: "tensorflow.core.protobuf.fingerprint_pb2",
    checkpoint_state_pb2.CheckpointState: "tensorflow.python.training.checkpoint_state_pb2",
}


@pytest.mark.tf
@pytest.mark.parametrize("message_type", list(TF_MODULES), ids=lambda m: m.DESCRIPTOR.name)
def test_descriptors_match_tensorflows_field_for_field(message_type):
    import importlib
    pytest.importorskip("tensorflow")
    module = importlib.import_module(TF_MODULES[message_type])
    theirs = getattr(module, message_type.DESCRIPTOR.name).DESCRIPTOR
    assert _descriptor_differences(message_type.DESCRIPTOR, theirs) == []


@pytest.mark.tf
@pytest.mark.parametrize("name", SAVED_MODELS)
def test_tensorflow_parses_what_gradreg_serializes(name):
    pytest.importorskip("tensorflow")
    from tensorflow.core.protobuf import saved_model_pb2 as tf_saved_model_pb2
    ours = saved_model.read_saved_model(DATA / name)
    theirs = tf_saved_model_pb2.SavedModel.FromString(ours.SerializeToString())
    assert theirs.SerializeToString(deterministic=True) == (DATA / name / "saved_model.pb").read_bytes()


# -- reading SavedModel directories -------------------------------------------------------------
def test_not_a_saved_model_directory_is_a_typed_error(tmp_path):
    with pytest.raises(SavedModelError, match="no such SavedModel directory"):
        saved_model.read_saved_model(tmp_path / "missing")
    with pytest.raises(SavedModelError, match=r"not a SavedModel \(no saved_model.pb or saved_model.pbtxt\)"):
        saved_model.read_saved_model(tmp_path)
    with pytest.raises(SavedModelError, match="it contains model.ckpt-2.data-00000-of-00001, a TensorFlow "
                                              "checkpoint file"):
        saved_model.read_saved_model(DATA / "tf1")
    (tmp_path / "saved_model.pb").write_bytes(b"\x12\xff\xff")
    with pytest.raises(SavedModelError, match="saved_model.pb: not a SavedModel proto"):
        saved_model.read_saved_model(tmp_path)
    assert issubclass(SavedModelError, GraphFileError)


def test_text_saved_model_is_read(tmp_path):
    model = saved_model.read_saved_model(DATA / "saved_module")
    (tmp_path / "saved_model.pbtxt").write_text(text_format.MessageToString(model))
    assert saved_model.read_saved_model(tmp_path) == model


def test_missing_tag_set_lists_the_ones_there_are():
    model = saved_model.read_saved_model(DATA / "saved_module")
    with pytest.raises(SavedModelError, match=r"no MetaGraph with tags \['train'\]; it has tag sets \[\['serve'\]\]"):
        saved_model.meta_graph(model, ("train",))


@pytest.mark.parametrize("name", SAVED_MODELS)
def test_saved_model_variables_hold_tensorflows_loaded_values(name):
    found = saved_model.saved_model_variables(DATA / name)
    assert sorted(f"{v.name}:0" for v in found) == META["saved_models"][name]["variables"]
    reader = BundleReader(saved_model.variables_prefix(DATA / name))
    with np.load(DATA / "expected.npz") as stored:
        for var in found:
            value = reader.read(var.checkpoint_key)
            np.testing.assert_array_equal(value, stored[f"{name}|var|{var.name}:0"], err_msg=var.name)
            assert value.dtype == var.dtype.storage and value.shape == var.shape


def test_saved_module_variables_carry_node_ids_paths_and_trainability():
    found = {v.name: v for v in saved_model.saved_model_variables(DATA / "saved_module")}
    graph = saved_model.meta_graph(saved_model.read_saved_model(DATA / "saved_module"))
    for var in found.values():
        node = graph.object_graph_def.nodes[var.node_id]
        assert node.WhichOneof("kind") == "variable" and node.variable.name == var.name
    assert found["w"].path == ("w",) and found["w"].checkpoint_key == "w/.ATTRIBUTES/VARIABLE_VALUE"
    assert found["steps"].trainable is False and found["steps"].dtype is dtypes.int32


def test_variable_without_a_checkpoint_value_is_named(tmp_path):
    shutil.copytree(DATA / "saved_module", tmp_path / "m")
    model = saved_model.read_saved_model(tmp_path / "m")
    saved_model.meta_graph(model).object_graph_def.nodes[0].children[0].local_name = "renamed"
    (tmp_path / "m" / "saved_model.pb").write_bytes(model.SerializeToString())
    with pytest.raises(CheckpointError, match=r"SavedModel variable 'w' \(renamed, node 1\) has no value"):
        saved_model.saved_model_variables(tmp_path / "m")


# -- rewriting variables ------------------------------------------------------------------------
def test_rewritten_variables_are_read_back_and_the_rest_is_kept(tmp_path):
    found = {v.name: v for v in saved_model.saved_model_variables(DATA / "saved_module")}
    new_w = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = saved_model.write_saved_model_variables(
        DATA / "saved_module", {found["w"].node_id: new_w, found["steps"].checkpoint_key: 1},
        output_dir=tmp_path / "tuned")
    before = BundleReader(saved_model.variables_prefix(DATA / "saved_module"))
    after = BundleReader(saved_model.variables_prefix(out))
    np.testing.assert_array_equal(after.read(found["w"].checkpoint_key), new_w)
    assert int(after.read(found["steps"].checkpoint_key)) == 1
    for key in ("b/.ATTRIBUTES/VARIABLE_VALUE", tf_checkpoint.OBJECT_GRAPH_KEY):
        assert np.array_equal(after.read(key), before.read(key))
    original = (DATA / "saved_module" / "saved_model.pb").read_bytes()
    assert (tmp_path / "tuned" / "saved_model.pb").read_bytes() == original
    with np.load(DATA / "expected.npz") as stored:     # the original is untouched
        np.testing.assert_array_equal(before.read(found["w"].checkpoint_key), stored["saved_module|var|w:0"])


def test_rewrite_refuses_a_wrong_shape_dtype_or_name(tmp_path):
    shutil.copytree(DATA / "saved_module", tmp_path / "m")
    before = (tmp_path / "m" / "variables" / "variables.index").read_bytes()
    with pytest.raises(CheckpointError, match=r"new value of 'w/.ATTRIBUTES/VARIABLE_VALUE' has shape \[2, 3\]"):
        saved_model.write_saved_model_variables(tmp_path / "m", {1: np.zeros((2, 3), np.float32)})
    with pytest.raises(CheckpointError, match="new value of 'w/.ATTRIBUTES/VARIABLE_VALUE' is complex64"):
        saved_model.write_saved_model_variables(tmp_path / "m", {1: np.zeros((3, 2), np.complex64)})
    with pytest.raises(CheckpointError, match="no variable 99 to replace"):
        saved_model.write_saved_model_variables(tmp_path / "m", {99: 1.0})
    assert (tmp_path / "m" / "variables" / "variables.index").read_bytes() == before


@pytest.mark.tf
@pytest.mark.parametrize("name", SAVED_MODELS)
def test_tensorflow_loads_the_rewritten_values(tmp_path, name):
    tf = pytest.importorskip("tensorflow")
    found = saved_model.saved_model_variables(DATA / name)
    new = {v.node_id: np.full(v.shape, 0.5 + v.node_id, v.dtype.np) for v in found}
    out = saved_model.write_saved_model_variables(DATA / name, new, output_dir=tmp_path / "m")
    loaded = tf.saved_model.load(str(out))
    view = tf.train.TrackableView(loaded)
    by_name: dict[str, list] = {}
    for obj in view.descendants():
        if isinstance(obj, tf.Variable):
            by_name.setdefault(obj.name, []).append(obj.numpy())
    for var in found:
        assert any(np.array_equal(value, new[var.node_id]) for value in by_name[f"{var.name}:0"]), var.name
    # and the model computes with them: the signature's output differs from the original's
    signature = loaded.signatures["serving_default"]
    with np.load(DATA / "expected.npz") as stored:
        inputs = {k.split("|")[-1]: stored[k] for k in stored.files
                  if k.startswith(f"{name}|input|serving_default|")}
        original = {k.split("|")[-1]: stored[k] for k in stored.files if k.startswith(f"{name}|sig|serving_default|")}
    outputs = signature(**{k: tf.constant(v) for k, v in inputs.items()})
    assert set(outputs) == set(original)
    assert any(not np.allclose(outputs[k].numpy(), original[k]) for k in original)


# -- other model files --------------------------------------------------------------------------
@pytest.mark.parametrize("name,kind", [("model.keras", "keras"), ("model.h5", "hdf5"), ("model.onnx", "onnx"),
                                       ("model.tflite", "tflite")])
def test_other_model_files_are_recognised_and_named(name, kind):
    path = DATA / "other_formats" / name
    assert model_kinds.identify_model_file(path) == kind
    with pytest.raises(UnsupportedModelFormatError) as raised:
        model_kinds.check_model_file(path)
    assert raised.value.format == kind and str(path) in str(raised.value)
    with pytest.raises(UnsupportedModelFormatError, match="not a TensorFlow graph"):
        saved_model.read_saved_model(path)


def test_saved_model_parts_and_graphdefs_are_told_apart():
    assert model_kinds.identify_model_file(DATA / "saved_module") == "saved_model_dir"
    assert model_kinds.identify_model_file(DATA / "saved_module" / "saved_model.pb") == "saved_model_pb"
    assert model_kinds.identify_model_file(DATA / "object" / "ckpt-1.index") == "checkpoint"
    graphdef = saved_model.meta_graph(saved_model.read_saved_model(DATA / "saved_module")).graph_def
    assert graphdef.node
    with pytest.raises(UnsupportedModelFormatError, match="pass the SavedModel's directory instead"):
        model_kinds.check_model_file(DATA / "saved_module" / "saved_model.pb")


def test_a_graphdef_file_is_not_mistaken_for_another_format(tmp_path):
    graphdef = saved_model.meta_graph(saved_model.read_saved_model(DATA / "saved_module")).graph_def
    (tmp_path / "graph.pb").write_bytes(graphdef.SerializeToString())
    assert model_kinds.identify_model_file(tmp_path / "graph.pb") is None
    model_kinds.check_model_file(tmp_path / "graph.pb")       # no error: gradreg reads GraphDefs


def test_a_directory_named_saved_model_pb_does_not_make_a_saved_model(tmp_path):
    (tmp_path / "saved_model.pb").mkdir()
    assert not model_kinds.is_saved_model_dir(tmp_path)
    assert model_kinds.identify_model_file(tmp_path) is None
    with pytest.raises(GraphFileError, match="a directory, not a graph"):
        load_graph(str(tmp_path))
    shutil.copy(DATA / "saved_module" / "saved_model.pb", tmp_path / "model.pb")
    (tmp_path / "saved_model.pbtxt").write_text("")
    assert model_kinds.is_saved_model_dir(tmp_path)
    assert model_kinds.identify_model_file(tmp_path) == "saved_model_dir"
    assert not model_kinds.is_saved_model_dir(tmp_path / "model.pb")
