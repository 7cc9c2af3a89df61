"""The op sweep: every op type of TensorFlow's gradient registry, checked case by case against the
values TensorFlow computed (tests/data/op_sweep, written by its make_reference.py; see its README).

For each stored case whose op types gradreg defines (per the registry at test time):
* gradreg runs the forward graph TensorFlow wrote and differentiates it itself
  (``gradients(ys, xs, grad_ys=cotangents)``): forward values and gradients match TensorFlow's;
* gradreg runs TensorFlow's own gradient graph (tf_grad.pb) and gets TensorFlow's gradients;
* with TensorFlow installed, TensorFlow runs gradreg's gradient graph and gets gradreg's numbers.
Where TensorFlow's own gradient is wrong (TENSORFLOW_WRONG), gradreg's is checked against finite
differences instead.
Cases whose op types gradreg does not define are collected and reported by one test, which also
holds the coverage figure (tools/op_coverage.py) at or above the committed baseline.

Known failures are listed in KNOWN_FAILURES and run as strict xfails: fixing one makes its test
fail until the entry is removed.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import pathlib

import numpy as np
import pytest
from reference_data import load_reference

import gradreg as gr
from gradreg.autodiff.gradients import as_dense_gradients
from gradreg.model.attrs import from_attr_value
from gradreg.proto import graph_pb2, op_def_pb2
from gradreg.registry import get_registry

# A resource variable's gradient (ResourceGather cases) is IndexedSlices of unknown dense shape.
pytestmark = pytest.mark.filterwarnings("ignore:Converting sparse IndexedSlices")

DATA = pathlib.Path(__file__).parent / "data" / "op_sweep"
TOOLS = pathlib.Path(__file__).parent.parent / "tools"

# check -> case id -> why it fails today. Checks: "gradreg" (forward + gradreg's gradients),
# "tf_grad" (TensorFlow's gradient graph run by gradreg), "tf_import" (gradreg's gradient graph
# run by TensorFlow).
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "gradreg": {
        "ImageProjectiveTransformV3.f64_bilinear": "TensorFlow (and gradreg, to match it) mixes float64 images in "
                                                   "float32: central differences at step 1e-6 are rounding noise; "
                                                   "tests/test_nn_image_ops.py checks the rule with a wider step",
    },
    "tf_grad": {
        "ImageProjectiveTransformV3.f64_bilinear": "TensorFlow's gradient graph inverts the transform with a float32 "
                                                   "MatrixInverse: gradreg's LAPACK inverse rounds differently, and "
                                                   "float64 images carry the difference (1e-6 relative)",
    },
    "tf_import": {
        "Enter.while_with_cond": "TensorFlow: 'Retval[0] does not have value': in gradreg's gradient of a v1 cond "
                                 "inside a v1 while loop the fetched gradient arrives dead in TensorFlow's executor",
        **{f"{op}.{case}": "TensorFlow's shape function gives the pooling sequences n_out entries (they have "
                           "n_out + 1): its session refuses the fed sequences"
           for op in ("FractionalAvgPool", "FractionalMaxPool") for case in ("f32", "f64", "f64_overlapping")},
    },
}

# Cases whose output comes in the solver's own order: the eigenvalues of a real matrix, which
# TensorFlow's Eig orders as Eigen's real Schur solver deflates them and gradreg as LAPACK's does.
# Both give the same eigenvalues (and so the same eigenpairs), as a set: these cases match gradreg's
# eigenvalues to TensorFlow's, compare them in that order, and feed each eigenvalue the cotangent
# TensorFlow's twin got, so the gradients (sums over the eigenpairs) must agree exactly.
UNORDERED_OUTPUTS = {"Eig.f64_values"}

# Cases where TensorFlow's own gradient is wrong. gradreg's gradients of these are checked against
# central finite differences of L = Re(sum(conj(cotangent) * y)) (TensorFlow's convention for
# complex gradients: dL/dRe(x) + i dL/dIm(x)), and must differ from TensorFlow's stored numbers,
# so an entry goes stale, and fails, if either side changes. The generator's own finite-difference
# check of TensorFlow (index.json, "finite_differences_disagree") found them.
_NO_CONJ = "TensorFlow's complex rule omits the conjugate its other rules apply (tf.gradients of the same function " \
           "written with Mul/Div/Log agrees with finite differences)"
_NO_BETAINC_AB = "TensorFlow gives a and b no gradient; gradreg differentiates the series in a and b"
_LOG_DET_COMPLEX = ("log|det| is real: only the real part of its cotangent counts (TensorFlow uses the complex "
                    "cotangent)")
_V2_BAND = ("TensorFlow's V2 rule emits V3 ops with V3's default alignment (RIGHT_LEFT); V2 aligns every diagonal "
            "LEFT_LEFT, so shorter diagonals of a band get the wrong entries")
_NO_ZETA_X = "TensorFlow gives x no gradient; gradreg differentiates the Euler-Maclaurin sum in x"
_REAL_VALUED = ("the op's complex output is real-valued (|x - y|^2, a norm): only the real part of its cotangent "
                "counts; TensorFlow's rule uses the whole complex cotangent")
_PROJECTIVE = "TensorFlow transforms the gradient with the inverse transform, which is not the transpose of the " \
              "sampling (bilinear weights, the map's Jacobian, fill regions, reflected and wrapped coordinates)"
_BATCH_STATISTICS = "TensorFlow ignores the cotangents of batch_mean and batch_variance (and, with an exponential " \
                    "average factor, gives the running mean and variance inputs no gradient)"
_POPULATION_STATISTICS = "TensorFlow gives the mean and variance inputs no gradient in inference mode"
TENSORFLOW_WRONG: dict[str, str] = {
    **{f"{op}.{case}": _BATCH_STATISTICS for op in ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
       for case in ("f32_training", "f32_running_average")},
    **{case: _POPULATION_STATISTICS for case in (
        "FusedBatchNorm.f32_inference", "FusedBatchNormV2.f32_inference", "FusedBatchNormV3.f32_inference",
        "FusedBatchNormGrad.f32_inference", "FusedBatchNormGradV2.f32_inference",
        "FusedBatchNormGradV3.f32_inference")},
    **{case: _PROJECTIVE for case in (
        "ImageProjectiveTransformV2.f32_bilinear", "ImageProjectiveTransformV2.f32_nearest",
        "ImageProjectiveTransformV3.f32_bilinear_constant", "ImageProjectiveTransformV3.f32_bilinear_nearest",
        "ImageProjectiveTransformV3.f32_bilinear_reflect", "ImageProjectiveTransformV3.f32_bilinear_wrap",
        "ImageProjectiveTransformV3.f32_nearest_constant", "ImageProjectiveTransformV3.f32_nearest_nearest",
        "ImageProjectiveTransformV3.f32_nearest_reflect", "ImageProjectiveTransformV3.f32_nearest_wrap",
        "ImageProjectiveTransformV3.f64_bilinear")},
    "Betainc.f32": _NO_BETAINC_AB, "Betainc.f64": _NO_BETAINC_AB, "Betainc.f64_unknown": _NO_BETAINC_AB,
    "LogMatrixDeterminant.c64": _LOG_DET_COMPLEX, "LogMatrixDeterminant.c128": _LOG_DET_COMPLEX,
    "MatrixDiagPartV2.f64_k_band": _V2_BAND, "MatrixDiagV2.f64_k_band": _V2_BAND,
    "MatrixSetDiagV2.f64_k_band": _V2_BAND,
    "MatrixSquareRoot.c128": "TensorFlow's rule transposes where the Sylvester equation's adjoint conjugates too",
    "PadV2.f32": "TensorFlow gives constant_values no gradient; it is the sum of the cotangent over the padding",
    "PadV2.f64": "TensorFlow gives constant_values no gradient",
    "PadV2.c64": "TensorFlow gives constant_values no gradient",
    "PadV2.f64_unknown": "TensorFlow gives constant_values no gradient",
    "Xdivy.c64": _NO_CONJ, "Xdivy.c128": _NO_CONJ, "Xlogy.c64": _NO_CONJ, "Xlogy.c128": _NO_CONJ,
    "Xlog1py.c64": _NO_CONJ, "Xlog1py.c128": _NO_CONJ, "Cumprod.c64_axis1": _NO_CONJ,
    "MatrixDeterminant.c64": _NO_CONJ, "MatrixDeterminant.c128": _NO_CONJ,
    "Svd.c128_values": "singular values are real: only the real part of their cotangent counts (TensorFlow uses "
                       "the complex cotangent)",
    "SoftmaxCrossEntropyWithLogits.f64_both_outputs": "TensorFlow's labels gradient ignores the cotangent of the "
                                                      "second (backprop) output",
    "SquaredDifference.c64": _REAL_VALUED, "SquaredDifference.c128": _REAL_VALUED, "MulNoNan.c64": _NO_CONJ,
    "MulNoNan.c128": _NO_CONJ, "EuclideanNorm.c64_axis1": _REAL_VALUED,
    "Cumprod.f64_with_zero": "TensorFlow divides by x, wrong where x is 0",
    "DynamicStitch.f64_duplicate_indices": "only the last slice stitched into a row reaches the output; TensorFlow "
                                           "gives the overwritten slice the row's gradient too",
    "TensorScatterUpdate.f64_duplicate_indices": "only the update that lands (the last on CPU) moves the output; "
                                                 "TensorFlow gives both duplicates the gradient",
    "TridiagonalSolve.c128": "TensorFlow's rule solves the transposed system where the adjoint (conjugated) one "
                             "is needed, and pairs the solution unconjugated",
    **{f"Zeta.{variant}": _NO_ZETA_X for variant in ("f32", "f32_scalar_y", "f64", "f64_bcast_both", "f64_bcast_row",
                                                     "f64_scalar_x", "f64_unknown")},
    **{f"BlockLSTMV2.{case}": "TensorFlow's rule differentiates BlockLSTMV2 with BlockLSTMGrad, whose gates are "
                               "BlockLSTM's (i, c, f, o), not V2's (i, f, c, o): the c and f gates' gradients trade "
                               "places; gradreg's rule uses BlockLSTMGradV2" for case in ("f32", "f32_peephole")},
    "TensorListGather.f64": "TensorFlow's rule scatters the gradient into a list, so of an index gathered twice "
                            "only one gradient survives; gradreg sums them",
}


# -- the stored data ------------------------------------------------------------------------------------

def families() -> list[str]:
    return sorted(p.name[:-len(".forward.pb")] for p in DATA.glob("*.forward.pb"))


@functools.cache
def family_data(family: str):
    cases, array = load_reference("op_sweep", family)
    graphs = {}
    for kind in ("forward", "tf_grad"):
        graph_def = graph_pb2.GraphDef()
        graph_def.ParseFromString((DATA / f"{family}.{kind}.pb").read_bytes())
        graphs[kind] = graph_def
    return {c["id"]: c for c in cases}, array, graphs


def all_cases() -> list[tuple[str, dict]]:
    return [(family, record) for family in families() for record in family_data(family)[0].values()]


def _called_functions(nodes, functions: dict) -> set[str]:
    """Names of the library functions ``nodes`` call, directly or through other functions."""
    found: set[str] = set()
    pending = list(nodes)
    while pending:
        node = pending.pop()
        for entry in node.attr:      # gradreg's protos keep maps as repeated entries, in file order
            attr = entry.value
            names = [attr.func.name] if attr.HasField("func") else [f.name for f in attr.list.func]
            for name in names:
                if name in functions and name not in found:
                    found.add(name)
                    pending.extend(functions[name].node_def)
    return found


def case_graph_def(family: str, case_id: str, kind: str) -> graph_pb2.GraphDef:
    """The nodes of one case (its name scope) and the library functions they call."""
    source = family_data(family)[2][kind]
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(source.versions)
    nodes = [n for n in source.node if n.name.startswith(case_id + "/")]
    out.node.extend(nodes)
    functions = {f.signature.name: f for f in source.library.function}
    called = _called_functions(nodes, functions)
    out.library.function.extend(f for name, f in functions.items() if name in called)
    out.library.gradient.extend(g for g in source.library.gradient if g.function_name in called)
    return out


def load_case_graph(family: str, case_id: str, kind: str) -> gr.Graph:
    return gr.import_graph_def(case_graph_def(family, case_id, kind), source=f"op_sweep/{family}.{kind}.pb[{case_id}]")


def feeds(record: dict, array) -> dict:
    out = {i["name"]: array(i["array"]) for i in record["inputs"]}
    out.update({c["name"]: array(c["array"]) for c in record["cotangents"]})
    out.update({r["name"]: array(r["array"]) for r in record["random_outputs"]})
    return out


def matching_order(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """The permutation p of the last axis with ours[..., p] close to theirs: each of TensorFlow's
    values takes the nearest of gradreg's not yet taken (one batch of values per row)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape, f"shape {ours.shape} != {theirs.shape}"
    rows_ours, rows_theirs = ours.reshape(-1, ours.shape[-1]), theirs.reshape(-1, theirs.shape[-1])
    perm = np.zeros(rows_ours.shape, np.int64)
    for row, (mine, tf_row) in enumerate(zip(rows_ours, rows_theirs)):
        free = list(range(mine.size))
        for i, value in enumerate(tf_row):
            j = min(free, key=lambda k: abs(mine[k] - value))
            perm[row, i] = j
            free.remove(j)
    return perm.reshape(ours.shape)


def matched_feeds(graph, record: dict, array) -> tuple[dict, np.ndarray]:
    """For an UNORDERED_OUTPUTS case: the feeds with each cotangent entry moved to where gradreg
    puts the value TensorFlow paired it with, and that permutation (of the one output)."""
    base = feeds(record, array)
    (y,), (c,) = record["ys"], record["cotangents"]
    ours = gr.Session(graph).run(y["name"], base)
    perm = matching_order(ours, array(y["array"]))
    cotangent = array(c["array"])
    moved = np.empty_like(cotangent)
    np.put_along_axis(moved, perm, cotangent, axis=-1)
    return {**base, c["name"]: moved}, perm


def assert_close(actual, expected, what: str) -> None:
    """The corpus tolerances (float64 rtol 1e-6; float32 rtol 2e-3, atol 2e-5), complex by
    component precision; float16 rtol 1e-2, atol 1e-3."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.dtype in (np.float64, np.complex128):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-10, err_msg=what)
    elif expected.dtype in (np.float32, np.complex64):
        np.testing.assert_allclose(actual, expected, rtol=2e-3, atol=2e-5, err_msg=what)
    elif expected.dtype == np.float16:
        np.testing.assert_allclose(actual, expected, rtol=1e-2, atol=1e-3, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


# -- which cases run ----------------------------------------------------------------------------------------

def undefined_ops(op_types) -> list[str]:
    registry = get_registry()
    return sorted(op for op in op_types if registry.op_definition(op) is None)


def _params(check: str, ops_key: str) -> list:
    params = []
    for family, record in all_cases():
        if undefined_ops(record[ops_key]):
            continue
        if check == "tf_import" and not record.get("tf_runs", True):
            continue     # TensorFlow has no CPU kernel for the op: its twin gave the values
        reason = KNOWN_FAILURES[check].get(record["id"])
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(family, record["id"], id=record["id"], marks=marks))
    return params


def _case(family: str, case_id: str):
    cases, array, _ = family_data(family)
    return cases[case_id], array


def differentiate(family: str, case_id: str):
    """The case's forward graph with gradreg's gradients added, and those gradients (dense)."""
    record, _ = _case(family, case_id)
    graph = load_case_graph(family, case_id, "forward")
    with graph.as_default():
        ys = [graph.get_tensor(y["name"]) for y in record["ys"]]
        xs = [graph.get_tensor(x) for x in record["xs"]]
        cotangents = [graph.get_tensor(c["name"]) for c in record["cotangents"]]
        grads = as_dense_gradients(gr.gradients(ys, xs, grad_ys=cotangents))
    return graph, ys, grads


def _run(graph, record, array, fetches, feed_dict=None):
    sess = gr.Session(graph)
    if record["init"]:
        sess.run(record["init"])
    return sess.run(fetches, feeds(record, array) if feed_dict is None else feed_dict)


def _check_gradients(record, array, values, where: str) -> None:
    for x, theirs, ours in zip(record["xs"], record["tf_grads"], values):
        if theirs is None:
            assert ours is None, f"{where}: TensorFlow has no gradient for {x}, gradreg has one"
        else:
            assert ours is not None, f"{where}: no gradient for {x}"
            assert_close(ours, array(theirs["array"]), f"{where} d/d{x}")


# -- the checks -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family, case_id", _params("gradreg", "forward_ops"))
def test_gradreg_matches_tensorflow(family, case_id):
    record, array = _case(family, case_id)
    graph, ys, grads = differentiate(family, case_id)
    connected = [g for g in grads if g is not None]
    feed_dict, perm = matched_feeds(graph, record, array) if case_id in UNORDERED_OUTPUTS else (None, None)
    values = _run(graph, record, array, ys + connected, feed_dict)
    for y, value in zip(record["ys"], values):
        if perm is not None:
            value = np.take_along_axis(value, perm, axis=-1)
        assert_close(value, array(y["array"]), f"{case_id} forward {y['name']}")
    rest = iter(values[len(ys):])
    ours = [None if g is None else next(rest) for g in grads]
    if case_id not in TENSORFLOW_WRONG:
        _check_gradients(record, array, ours, case_id)
        return
    differs = False
    for x, theirs, mine, numeric in zip(record["xs"], record["tf_grads"], ours,
                                        finite_difference_gradients(graph, record, array)):
        assert mine is not None, f"{case_id}: no gradient for {x}"
        _assert_numerically_close(mine, numeric, f"{case_id} d/d{x} against finite differences")
        differs |= theirs is None or not np.allclose(mine, array(theirs["array"]), rtol=1e-3, atol=1e-6)
    assert differs, f"{case_id}: TensorFlow now agrees with gradreg; remove the TENSORFLOW_WRONG entry"


def finite_difference_gradients(graph, record: dict, array) -> list[np.ndarray]:
    """Central differences of L = Re(sum(conj(cotangent) * y)) w.r.t. each x, run by gradreg
    (its forward values are checked against TensorFlow's first)."""
    base = feeds(record, array)
    ys = [y["name"] for y in record["ys"]]
    cotangents = [array(c["array"]).astype(np.complex128) for c in record["cotangents"]]
    sess = gr.Session(graph)

    def loss(feed_dict):
        values = sess.run(ys, feed_dict)
        return sum(float(np.real(np.sum(np.conj(c) * v.astype(np.complex128)))) for c, v in zip(cotangents, values))
    out = []
    for x in record["xs"]:
        value = np.array(base[x])     # 0-d where the feed is a scalar: indexable by ()
        precise = value.dtype in (np.float64, np.complex128)
        units = (1.0, 1j) if np.iscomplexobj(value) else (1.0,)
        grad = np.zeros(value.shape, np.complex128 if np.iscomplexobj(value) else np.float64)
        for index in np.ndindex(value.shape):
            step = (1e-6 if precise else 1e-3) * max(1.0, abs(value[index]))
            for unit in units:
                plus, minus = value.copy(), value.copy()
                plus[index] += step * unit
                minus[index] -= step * unit
                grad[index] += unit * (loss({**base, x: plus}) - loss({**base, x: minus})) / (2 * step)
        out.append(grad.astype(value.dtype))
    return out


def _assert_numerically_close(actual, numeric, what: str) -> None:
    precise = numeric.dtype in (np.float64, np.complex128)
    # float32: a coarse check (as the generator's): it catches wrong rules, not rounding
    np.testing.assert_allclose(actual, numeric, rtol=1e-5 if precise else 5e-2, atol=1e-6 if precise else 1e-2,
                               err_msg=what)


@pytest.mark.parametrize("family, case_id", _params("tf_grad", "gradient_ops"))
def test_tensorflow_gradient_graph_runs_in_gradreg(family, case_id):
    record, array = _case(family, case_id)
    graph = load_case_graph(family, case_id, "tf_grad")
    fetch, slots = [], []
    for g in record["tf_grads"]:
        tensor = None if g is None else g["tensor"]
        slots.append(tensor)
        if isinstance(tensor, dict):
            fetch += [tensor["values"], tensor["indices"], tensor["dense_shape"]]
        elif tensor is not None:
            fetch.append(tensor)
    feed_dict = None
    if case_id in UNORDERED_OUTPUTS:
        feed_dict, _ = matched_feeds(load_case_graph(family, case_id, "forward"), record, array)
    got = iter(_run(graph, record, array, fetch, feed_dict))
    values = []
    for tensor in slots:
        if isinstance(tensor, dict):
            vals, idx, shape = next(got), next(got), next(got)
            dense = np.zeros(shape, vals.dtype)
            np.add.at(dense, idx, vals)
            values.append(dense)
        else:
            values.append(None if tensor is None else next(got))
    _check_gradients(record, array, values, f"{case_id} (TensorFlow's gradient graph)")


@pytest.mark.tf
@pytest.mark.parametrize("family, case_id", _params("tf_import", "forward_ops"))
def test_tensorflow_runs_gradregs_gradient_graph(family, case_id):
    tf = pytest.importorskip("tensorflow")
    record, array = _case(family, case_id)
    if KNOWN_FAILURES["gradreg"].get(case_id):
        pytest.skip("gradreg's own gradients of this case are a known failure")
    graph, _, grads = differentiate(family, case_id)
    connected = [(k, g.name) for k, g in enumerate(grads) if g is not None]
    # TensorFlow's Eig runs in TensorFlow's order: gradreg's run gets the cotangents in its own
    feed_dict = matched_feeds(graph, record, array)[0] if case_id in UNORDERED_OUTPUTS else None
    ours = _run(graph, record, array, [name for _, name in connected], feed_dict)
    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf.graph_util.import_graph_def(tf.compat.v1.GraphDef.FromString(graph.as_graph_def().SerializeToString()),
                                       name="")
    with tf.compat.v1.Session(graph=tf_graph) as sess:
        if record["init"]:
            sess.run(record["init"])
        got = sess.run([name for _, name in connected], feeds(record, array))
    for (_, name), theirs, mine in zip(connected, got, ours):
        assert_close(theirs, mine, f"{case_id} {name}: TensorFlow's run of gradreg's gradient graph")


# -- what is missing, and the floor under the coverage figure ------------------------------------------------

def _op_coverage():
    spec = importlib.util.spec_from_file_location("op_coverage", TOOLS / "op_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_op_types_are_reported_and_coverage_holds_its_baseline(capsys):
    missing: dict[str, list[str]] = {}
    missing_in_tf_grad: dict[str, list[str]] = {}   # cases gradreg differentiates, but whose TF graph it cannot load
    for _, record in all_cases():
        forward = undefined_ops(record["forward_ops"])
        for op in forward:
            missing.setdefault(op, []).append(record["id"])
        for op in [] if forward else undefined_ops(record["gradient_ops"]):
            missing_in_tf_grad.setdefault(op, []).append(record["id"])
    census = _op_coverage()
    figures = census.coverage()
    baseline = json.loads((TOOLS / "op_coverage_baseline.json").read_text())
    with capsys.disabled():
        needing = len({c for v in missing.values() for c in v})
        print(f"\nop sweep: {len(all_cases())} stored cases; {needing} cases need "
              f"{len(missing)} op types gradreg does not define: {', '.join(sorted(missing))}")
        print(f"TensorFlow's gradient graphs of {len({c for v in missing_in_tf_grad.values() for c in v})} further "
              f"cases use op types gradreg does not define: {', '.join(sorted(missing_in_tf_grad))}")
        print(f"coverage: {figures['covered']} of {figures['registered']} TensorFlow gradient registrations "
              f"(baseline {baseline['covered']})")
    assert figures["registered"] == baseline["of"]
    assert figures["covered"] >= baseline["covered"], "coverage fell below the committed baseline"
    assert figures["covered_considered"] >= baseline["covered_considered"]


def test_known_failures_name_stored_cases():
    ids = {record["id"] for _, record in all_cases()}
    for check, entries in KNOWN_FAILURES.items():
        assert not set(entries) - ids, f"{check}: known failures naming no stored case"
    assert not set(TENSORFLOW_WRONG) - ids, "TENSORFLOW_WRONG names no stored case"
    assert not UNORDERED_OUTPUTS - ids, "UNORDERED_OUTPUTS names no stored case"


def test_matching_order_pairs_each_value_with_its_twin():
    ours = np.array([[3.0, 1.0 + 2.0j, 1.0 - 2.0j], [0.5, 0.25, 4.0]])
    theirs = np.array([[1.0 - 2.0j, 3.0 + 1e-12j, 1.0 + 2.0j], [4.0, 0.5, 0.25]])
    perm = matching_order(ours, theirs)
    assert perm.tolist() == [[2, 0, 1], [2, 0, 1]]
    np.testing.assert_allclose(np.take_along_axis(ours, perm, axis=-1), theirs, atol=1e-9)


def test_tensorflow_wrong_cases_are_the_ones_finite_differences_flagged():
    """The generator checked TensorFlow's gradients numerically; every case listed as TensorFlow's
    mistake is one it flagged (where it could check: not for random ops or mixed precisions)."""
    records = {record["id"]: record for _, record in all_cases()}
    for case_id in TENSORFLOW_WRONG:
        checks = records[case_id]["finite_differences"]
        if checks is not None:
            assert any(c["agrees"] is False for c in checks), case_id


def test_every_stored_case_checks_its_op_type():
    """A case exists to test its op: the op is in the forward graph and TensorFlow differentiated it."""
    for _, record in all_cases():
        assert record["op"] in record["forward_ops"], record["id"]
        assert any(g is not None for g in record["tf_grads"]), record["id"]


# -- op definitions against TensorFlow's ---------------------------------------------------------------------

@functools.cache
def tf_opdefs() -> dict:
    op_list = op_def_pb2.OpList()
    op_list.ParseFromString((DATA / "tf_opdefs.pb").read_bytes())
    return {op.name: op for op in op_list.op}


def _arg(a):
    return (a.name, a.type, a.type_attr, a.number_attr, a.type_list_attr, a.is_ref)


_UNREPRESENTABLE_TYPES = set(range(24, 34))   # float8 / int4 / int2 / float4: no NumPy dtype in gradreg


def opdef_differences(ours, theirs) -> list[str]:
    """Where gradreg's OpDef differs from TensorFlow's: arguments, attr names, kinds, defaults,
    minimums and allowed values (gradreg may leave out only types it cannot represent)."""
    problems = []
    for kind in ("input_arg", "output_arg"):
        if [_arg(a) for a in getattr(ours, kind)] != [_arg(a) for a in getattr(theirs, kind)]:
            problems.append(f"{kind} differ")
    our_attrs, their_attrs = {a.name: a for a in ours.attr}, {a.name: a for a in theirs.attr}
    if sorted(our_attrs) != sorted(their_attrs):
        return problems + [f"attrs {sorted(our_attrs)} != {sorted(their_attrs)}"]
    for name, a in their_attrs.items():
        b = our_attrs[name]
        if b.type != a.type:
            problems.append(f"attr {name}: type {b.type} != {a.type}")
        if b.HasField("default_value") != a.HasField("default_value") or (
                a.HasField("default_value") and from_attr_value(b.default_value) != from_attr_value(a.default_value)):
            problems.append(f"attr {name}: default differs")
        if a.has_minimum and not (b.has_minimum and b.minimum == a.minimum):
            problems.append(f"attr {name}: minimum differs")
        if sorted(b.allowed_values.list.s) != sorted(a.allowed_values.list.s):
            problems.append(f"attr {name}: allowed strings differ")
        theirs_allowed, ours_allowed = set(a.allowed_values.list.type), set(b.allowed_values.list.type)
        if ours_allowed - theirs_allowed or (theirs_allowed - ours_allowed - _UNREPRESENTABLE_TYPES):
            problems.append(f"attr {name}: allowed types differ")
    return problems


def _defined_tf_ops() -> list[str]:
    registry = get_registry()
    return sorted(op for op in tf_opdefs() if registry.op_definition(op) is not None)


@pytest.mark.parametrize("op_type", _defined_tf_ops())
def test_op_definition_matches_tensorflows(op_type):
    ours = get_registry().op_definition(op_type).op_def
    assert opdef_differences(ours, tf_opdefs()[op_type]) == []


def _defined_ops_not_stored() -> list[str]:
    return sorted(op for op in get_registry().ops if op not in tf_opdefs())


@pytest.mark.tf
@pytest.mark.parametrize("op_type", _defined_ops_not_stored())
def test_other_op_definitions_match_tensorflows(op_type):
    """The op types gradreg defines beyond the stored OpList (training, variables, ...), against
    TensorFlow's live registry; gradreg's own example ops (Swish) are not TensorFlow's."""
    op_def_registry = pytest.importorskip("tensorflow.python.framework.op_def_registry")
    theirs = op_def_registry.get(op_type)
    if theirs is None:
        pytest.skip(f"{op_type} is not a TensorFlow op")
    assert opdef_differences(get_registry().op_definition(op_type).op_def, theirs) == []


@pytest.mark.tf
def test_stored_tensorflow_opdefs_are_tensorflows():
    op_def_registry = pytest.importorskip("tensorflow.python.framework.op_def_registry")
    for name, stored in tf_opdefs().items():
        live = op_def_registry.get(name)
        assert live is not None and live.SerializeToString(deterministic=True) == \
            stored.SerializeToString(deterministic=True), name
