"""The array family against TensorFlow: every case of tests/data/ops_array/ops.pb (a GraphDef
TensorFlow wrote, see make_reference.py there) runs in gradreg and must give TensorFlow's
values, dtypes and shapes; the static shapes gradreg infers on import must equal
TensorFlow's; and where TensorFlow's kernel raised, gradreg must raise an error naming the node."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from reference_data import model_op_types

import gradreg
from gradreg.errors import ExecutionError, GradregError
from gradreg.registry import get_registry

DATA = pathlib.Path(__file__).parent / "data" / "ops_array"
CASES = json.loads((DATA / "ops.json").read_text())
with np.load(DATA / "ops.npz") as _npz:
    ARRAYS = dict(_npz)


def stored(value: np.ndarray) -> np.ndarray:
    """Strings are stored as fixed-width bytes; gradreg holds them as object arrays of bytes."""
    return value.astype(object) if value.dtype.kind == "S" else value


def assert_matches(actual, expected: np.ndarray, dtype_name: str, what: str) -> None:
    """TensorFlow's value, with the graph's dtype and the same shape (float32 rtol 2e-3 atol 2e-5,
    float64 rtol 1e-6, everything else exact)."""
    actual = np.asarray(actual)
    expected = stored(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, TensorFlow {expected.shape}"
    assert actual.dtype == gradreg.as_dtype(dtype_name).storage, f"{what}: dtype {actual.dtype}, TF {dtype_name}"
    if expected.dtype.kind == "f" and expected.dtype.itemsize >= 8:
        np.testing.assert_allclose(actual, expected, rtol=1e-6, err_msg=what)
    elif expected.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=2e-3, atol=2e-5, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def feeds_of(case: dict) -> dict:
    return {name: stored(ARRAYS[f"{case['name']}/feed/{i}"]) for i, name in enumerate(case["feeds"])}


def missing_kernels(graph, fetches) -> list[str]:
    """Op types of other families the fetches need that have no kernel yet."""
    registry = get_registry()
    seen, stack, missing = set(), [graph.get_tensor(f).op for f in fetches], set()
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if registry.kernel_factory(op.type) is None:
            missing.add(op.type)
        stack.extend(t.op for t in op.inputs)
    return sorted(missing)


@pytest.fixture(scope="module")
def graph():
    return gradreg.load_graph(str(DATA / "ops.pb"))


@pytest.fixture(scope="module")
def session(graph):
    return gradreg.Session(graph, check_outputs=True)


@pytest.mark.parametrize("case", [c for c in CASES if not c["error"]], ids=lambda c: c["name"])
def test_values_match_tensorflow(graph, session, case):
    missing = missing_kernels(graph, case["fetches"])
    if missing:
        pytest.skip(f"needs kernels of other families: {missing}")
    outputs = session.run(case["fetches"], feeds_of(case))
    for j, (out, fetch, dtype) in enumerate(zip(outputs, case["fetches"], case["dtypes"])):
        assert_matches(out, ARRAYS[f"{case['name']}/out/{j}"], dtype, fetch)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_static_shapes_match_tensorflow(graph, case):
    for fetch, expected in zip(case["fetches"], case["static_shapes"]):
        assert graph.get_tensor(fetch).shape == gradreg.TensorShape(expected), fetch


@pytest.mark.parametrize("case", [c for c in CASES if c["error"]], ids=lambda c: c["name"])
def test_runtime_errors_like_tensorflow(graph, session, case):
    missing = missing_kernels(graph, case["fetches"])
    if missing:
        pytest.skip(f"needs kernels of other families: {missing}")
    with pytest.raises(GradregError) as info:
        session.run(case["fetches"], feeds_of(case))
    message = str(info.value)
    assert f"'{case['name']}/" in message, f"the error should name the failing node: {message}"
    if isinstance(info.value, ExecutionError):
        assert info.value.node_name.startswith(case["name"] + "/")
    expected = MESSAGE_DIFFERENCES.get(case["name"], case["message"].split(", node name:")[0])
    assert expected in message


# Where gradreg's message cannot be TensorFlow's word for word: the part it does share.
MESSAGE_DIFFERENCES = {
    "ensure_shape_bad": "[2,3] is not compatible with expected shape [3,?].",   # TF names its own _arg node
}


def test_every_array_op_has_a_reference_case(graph):
    """Every array op has TensorFlow values: in this file's graph, the op sweep's cases or the
    array area's (tests/data/array_area: the ops TensorFlow cannot differentiate); the TPU
    collectives, which TensorFlow cannot run on a CPU, its graphs (tests/data/replicas, run by
    tests/test_replicas.py)."""
    registry = get_registry()
    ours = {name for name in registry.ops if registry.ops.lookup(name).plugin == "array"}
    covered = {op.type for op in graph.get_operations()}
    covered |= set(json.loads((DATA.parent / "op_sweep" / "index.json").read_text())["ops"])
    covered |= {case["op"] for case in json.loads((DATA.parent / "array_area" / "cases.json").read_text())["cases"]}
    covered |= model_op_types()
    replicas = gradreg.proto.graph_pb2.GraphDef.FromString((DATA.parent / "replicas" / "tf_grad.pb").read_bytes())
    covered |= {node.op for node in replicas.node}
    assert ours - covered == set(), f"array ops without a TensorFlow reference case: {sorted(ours - covered)}"
