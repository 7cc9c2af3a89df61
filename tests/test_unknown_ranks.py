"""Shapes of unknown rank through every kernel and gradient rule, and through the freezer.

* The op sweep (tests/data/op_sweep) again, each case's graph with its placeholders' shapes
  erased and its constants turned into placeholders of unknown rank fed the same values (what a
  function body traced without shapes, or a frozen SavedModel, gives the kernels and rules):
  TensorFlow's forward values and gradients, or for TENSORFLOW_WRONG cases gradreg's own with
  the static shapes (which tests/test_op_sweep.py checks against finite differences). Where
  TensorFlow's rule itself needs static shapes (Qr, Svd with full_matrices, ApproxTopK), gradreg
  refuses as TensorFlow does, with a GradientError naming the node.
* Issue 28's SavedModel (tests/data/tf_models/saved_models/while_cond): a tf.while_loop over a
  variable-length input with a tf.cond in its body and a data-dependent tf.cond after it,
  differentiated (tests/test_saved_model.py) and frozen, then run and differentiated, by the API
  and the command line, against TensorFlow's values.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import test_op_sweep as sweep
from tf_models import assert_close, load_saved_model_case

import gradreg as gr
from gradreg.autodiff.gradients import as_dense_gradients
from gradreg.cli import main as cli_main
from gradreg.errors import GradientError
from gradreg.model import attrs as attr_util
from gradreg.model.tensor_util import to_ndarray
from gradreg.proto import attr_value_pb2, graph_pb2, tensor_shape_pb2

pytestmark = pytest.mark.filterwarnings("ignore:Converting sparse IndexedSlices")

# Cases whose rule needs static shapes in TensorFlow too: the message gradreg refuses with.
REFUSED = {"Qr": "matrix dimensions statically", "Svd.f64_full_matrices_values": "matrix dimensions statically",
           "ApproxTopK": "rank of its input is unknown"}


def _unknown_rank() -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(shape=tensor_shape_pb2.TensorShapeProto(unknown_rank=True))


def erase_shapes(graph_def: graph_pb2.GraphDef, constants: bool) -> dict[str, np.ndarray]:
    """Erase the placeholders' shapes and, with ``constants``, turn the constants outside loop
    frames (those without inputs) into placeholders of unknown rank; returns the constants'
    values, keyed by tensor."""
    values = {}
    for node in graph_def.node:
        if node.op == "PlaceholderWithDefault":
            attr_util.set_entry(node.attr, "shape", _unknown_rank())
            continue
        if constants and node.op == "Const" and not node.input:
            values[f"{node.name}:0"] = to_ndarray(attr_util.get_entry(node.attr, "value").tensor, node.name)
            node.op = "Placeholder"
        elif node.op != "Placeholder":
            continue
        kept = [e for e in node.attr if e.key == "dtype"]
        del node.attr[:]
        node.attr.extend(kept)
    return values


def _refusal(case_id: str) -> str | None:
    return next((m for prefix, m in REFUSED.items() if case_id == prefix or case_id.startswith(prefix + ".")), None)


def _params() -> list:
    return [pytest.param(family, record["id"], erase, id=f"{record['id']}-{erase}")
            for family, record in sweep.all_cases() for erase in ("inputs", "constants")
            if not sweep.undefined_ops(record["forward_ops"]) and record["id"] not in sweep.UNORDERED_OUTPUTS]


def _differentiated(family: str, case_id: str, erase: str | None):
    """The case's graph (``erase``: None, the placeholders' shapes ("inputs"), also the
    constants ("constants")) with gradreg's gradients; the values the constants' placeholders take."""
    record, _ = sweep._case(family, case_id)
    graph_def = sweep.case_graph_def(family, case_id, "forward")
    constants = erase_shapes(graph_def, erase == "constants") if erase else {}
    graph = gr.import_graph_def(graph_def)
    with graph.as_default():
        ys = [graph.get_tensor(y["name"]) for y in record["ys"]]
        grads = as_dense_gradients(gr.gradients(ys, [graph.get_tensor(x) for x in record["xs"]],
                                                grad_ys=[graph.get_tensor(c["name"]) for c in record["cotangents"]]))
    return graph, ys, grads, constants


def _values(family: str, case_id: str, erase: str | None):
    record, array = sweep._case(family, case_id)
    graph, ys, grads, constants = _differentiated(family, case_id, erase)
    session = gr.Session(graph)
    if record["init"]:
        session.run(record["init"], constants)
    values = session.run(ys + [g for g in grads if g is not None], {**sweep.feeds(record, array), **constants})
    rest = iter(values[len(ys):])
    return values[:len(ys)], [None if g is None else next(rest) for g in grads]


@pytest.mark.parametrize("family, case_id, erase", _params())
def test_the_sweep_with_shapes_unknown(family, case_id, erase):
    """``inputs``: placeholders of unknown rank, constants as they are (attribute-like inputs
    known, data shapes not: a function body traced without shapes); ``constants``: the
    constants too (nothing static but the op types)."""
    record, array = sweep._case(family, case_id)
    refusal = _refusal(case_id)
    if refusal is not None:
        with pytest.raises(GradientError, match=refusal):
            _differentiated(family, case_id, erase)
        return
    forward, grads = _values(family, case_id, erase)
    for y, value in zip(record["ys"], forward):
        sweep.assert_close(value, array(y["array"]), f"{case_id} forward {y['name']}")
    if case_id not in sweep.TENSORFLOW_WRONG:
        sweep._check_gradients(record, array, grads, f"{case_id} (unknown ranks)")
        return
    for x, ours, static in zip(record["xs"], grads, _values(family, case_id, None)[1]):
        assert (ours is None) == (static is None), f"{case_id} d/d{x}"
        if static is not None:
            sweep.assert_close(ours, static, f"{case_id} d/d{x} against the static shapes' gradient")


def test_a_row_read_with_an_index_of_unknown_rank():
    """x[i] (StridedSlice, shrink_axis_mask 1, constant strides) with i of unknown rank, as in a
    loop body whose counter has no static shape: its kernel took begin's shape as known."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, None)
        begin = gr.placeholder(gr.int32, None)
        row = gr.raw_ops.StridedSlice(input=x, begin=begin, end=begin + 1, strides=gr.constant([1]),
                                      shrink_axis_mask=1)
        (grad,) = gr.gradients(gr.reduce_sum(row * row), [x])
    value = np.arange(6, dtype=np.float32).reshape(3, 2)
    got_row, got_grad = gr.Session(graph).run([row, grad], {x: value, begin: np.array([-2], np.int32)})
    np.testing.assert_array_equal(got_row, [2, 3])
    np.testing.assert_array_equal(got_grad, [[0, 0], [4, 6], [0, 0]])


# -- issue 28's SavedModel: while_loop, cond inside and after, frozen -------------------------------------------

def _frozen(tmp_path, signature: str):
    case = load_saved_model_case("while_cond")
    path = tmp_path / f"{signature}.pb"
    assert cli_main(["freeze", str(case.model_path), "--signature", signature, "-o", str(path)]) == 0
    return case, path


@pytest.mark.parametrize("signature", ["serving_default", "reversed"])
def test_the_frozen_while_cond_model_runs_and_differentiates(signature, tmp_path, capsys):
    case, path = _frozen(tmp_path, signature)
    graph = gr.load_graph(str(path))
    xs = case.signature_inputs(signature)["xs"]
    with graph.as_default():
        (grad,) = gr.gradients(graph.get_tensor("y:0"), [graph.get_tensor("xs:0")])
    y, dxs = gr.Session(graph).run(["y:0", grad], {"xs:0": xs})
    assert_close(y, case.expected[f"out:{signature}/y"], f"{signature} y", case.meta["tolerance"])
    assert_close(dxs, case.expected[f"din:{signature}/y/xs"], f"{signature} dy/dxs", case.meta["tolerance"])


def test_the_command_line_runs_and_differentiates_the_frozen_graph(tmp_path, capsys):
    case, path = _frozen(tmp_path, "serving_default")
    np.save(tmp_path / "xs.npy", case.signature_inputs("serving_default")["xs"])
    capsys.readouterr()
    assert cli_main(["grad", str(path), "--ys", "y", "--xs", "xs", "--feed", f"xs={tmp_path / 'xs.npy'}",
                     "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    values = {v["name"]: np.array(v["values"], np.float32) for v in printed["values"]}
    assert_close(values["y:0"], case.expected["out:serving_default/y"], "y", case.meta["tolerance"])
    assert_close(values[printed["gradients"]["xs:0"]], case.expected["din:serving_default/y/xs"], "dy/dxs",
                 case.meta["tolerance"])
