"""The random family against TensorFlow, bit for bit: graphs TensorFlow and Keras wrote
(tests/data/random, see its make_reference.py) run in gradreg and give TensorFlow's values
exactly — stateless ops (v1 and V2) for many seeds, shapes, dtypes and algorithms, the seeded
stateful ops over three runs of a session, Keras Dropout masks and seeded initializers.
Values are compared as bytes, so -0.0 and 0.0 or one unit in the last place count."""
from __future__ import annotations

import ctypes
import ctypes.util
import platform

import numpy as np
import pytest
from reference_data import DATA, load_reference

import gradreg as gr
from gradreg.errors import ExecutionError, GradregError
from gradreg.registry import get_registry
from gradreg_plugins.random import libm, philox

CASES, ARRAY = load_reference("random", "reference")


def _cases(graph: str, run: int | None = None) -> list[dict]:
    return [c for c in CASES if c["graph"] == graph and (run is None or c["run"] == run)]


def _expected(case: dict) -> np.ndarray:
    return ARRAY(case["array"])


def assert_bits_equal(actual, case: dict) -> None:
    """``actual`` has the case's dtype and shape and, byte for byte, TensorFlow's values."""
    actual = np.asarray(actual)
    assert actual.dtype == np.dtype(case["dtype"]) and list(actual.shape) == case["shape"], case["name"]
    if "keep" in case:
        flat = actual.reshape(-1)
        actual = np.concatenate([flat[::case["keep"]], flat[-64:]])
    expected = _expected(case)
    actual, expected = actual.reshape(-1), expected.reshape(-1)
    assert np.array_equal(actual.view(np.uint8), expected.view(np.uint8)), \
        f"{case['name']}: {np.count_nonzero(actual != expected)} of {actual.size} values differ"


def _run_all(stem: str, cases: list[dict], feeds: dict | None = None, session=None) -> dict:
    session = session or gr.Session(gr.load_graph(DATA / "random" / f"{stem}.pb"))
    values = session.run([c["fetch"] for c in cases], feeds)
    return {c["name"]: v for c, v in zip(cases, values)}


# -- stateless -----------------------------------------------------------------------------------

STATELESS = _cases("stateless")


@pytest.fixture(scope="module")
def stateless_values():
    return _run_all("stateless", STATELESS)


@pytest.mark.parametrize("case", STATELESS, ids=[c["name"] for c in STATELESS])
def test_stateless_op_matches_tensorflow(stateless_values, case):
    assert_bits_equal(stateless_values[case["name"]], case)


def test_stateless_output_shapes_are_inferred():
    graph = gr.load_graph(DATA / "random" / "stateless.pb")
    for case in STATELESS:
        assert list(graph.get_tensor_by_name(case["fetch"]).shape.dims) == case["shape"], case["name"]


def test_stateless_ops_repeat_across_runs_and_sessions():
    graph = gr.load_graph(DATA / "random" / "stateless.pb")
    fetch = next(c["fetch"] for c in STATELESS if c["name"].startswith("StatelessTruncatedNormal_float32"))
    first = gr.Session(graph)
    assert np.array_equal(first.run(fetch), first.run(fetch))
    assert np.array_equal(first.run(fetch), gr.Session(graph).run(fetch))


# -- stateful ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stateful_graph():
    return gr.load_graph(DATA / "random" / "stateful.pb")


def test_stateful_ops_follow_tensorflows_streams_over_three_runs(stateful_graph):
    session = gr.Session(stateful_graph)
    for run in range(3):
        cases = _cases("stateful", run)
        values = _run_all("stateful", cases, session=session)
        for case in cases:
            assert_bits_equal(values[case["name"]], case)


def test_each_session_starts_the_streams_again(stateful_graph):
    cases = _cases("stateful", 0)
    gr.Session(stateful_graph).run([c["fetch"] for c in cases])
    values = _run_all("stateful", cases, session=gr.Session(stateful_graph))
    for case in cases:
        assert_bits_equal(values[case["name"]], case)


def test_stateful_streams_are_shared_by_every_plan_of_a_session(stateful_graph):
    """A node's generator belongs to the session, not to the fetch list: fetching it alone
    second continues the stream the first (joint) run started."""
    cases = {c["name"]: c for c in _cases("stateful", 1)}
    session = gr.Session(stateful_graph)
    session.run([c["fetch"] for c in _cases("stateful", 0)])
    case = cases["TruncatedNormal_float32"]
    assert_bits_equal(session.run(case["fetch"]), case)


def test_unseeded_stateful_ops_differ_between_sessions(graph):
    values = gr.raw_ops.RandomUniform(shape=[50], dtype=gr.float32)
    assert not np.array_equal(gr.Session(graph).run(values), gr.Session(graph).run(values))


# -- Keras ---------------------------------------------------------------------------------------

def test_keras_dropout_masks_match_tensorflow():
    cases = _cases("keras_dropout")
    feed = next(c for c in cases if c["name"] == "input")
    outputs = [c for c in cases if c is not feed]
    values = _run_all("keras_dropout", outputs, {feed["fetch"]: _expected(feed)})
    for case in outputs:
        assert_bits_equal(values[case["name"]], case)
        kept = values[case["name"]] != 0
        assert 0 < kept.mean() < 1, "a dropout mask keeps some values and drops others"


@pytest.mark.parametrize("case", _cases("keras_initializers"), ids=lambda c: c["name"])
def test_keras_initializer_matches_tensorflow(case):
    assert_bits_equal(_run_all("keras_initializers", [case])[case["name"]], case)


# -- errors --------------------------------------------------------------------------------------

def _key_counter(seed=(1, 2)):
    return gr.raw_ops.StatelessRandomGetKeyCounter(seed=np.array(seed, np.int64))


def test_bad_seed_is_an_error_naming_the_node(graph):
    seed = gr.placeholder(gr.int64, [None])
    values = gr.raw_ops.StatelessRandomUniform(shape=[3], seed=seed, name="noise")
    with pytest.raises(ExecutionError, match=r"noise.*seed must have shape \[2\], not \[3\]"):
        gr.Session(graph).run(values, {seed: [1, 2, 3]})


def test_unsupported_algorithm_is_refused(graph):
    key, counter = _key_counter()
    alg = gr.placeholder(gr.int32, [])
    values = gr.raw_ops.StatelessRandomUniformV2(shape=[3], key=key, counter=counter, alg=alg)
    session = gr.Session(graph)
    assert np.array_equal(session.run(values, {alg: 3}), session.run(values, {alg: 1}))
    with pytest.raises(ExecutionError, match="Unsupported algorithm id: 2"):
        session.run(values, {alg: 2})


def test_short_counter_is_refused(graph):
    key, _ = _key_counter()
    counter = gr.placeholder(gr.uint64, [None])
    values = gr.raw_ops.StatelessRandomNormalV2(shape=[3], key=key, counter=counter, alg=1)
    with pytest.raises(ExecutionError, match="counter must be a vector with length at least 2"):
        gr.Session(graph).run(values, {counter: np.array([5], np.uint64)})


def test_empty_range_is_refused_unless_the_output_is_empty(graph):
    shape = gr.placeholder(gr.int32, [1])
    values = gr.raw_ops.StatelessRandomUniformInt(shape=shape, seed=np.array([1, 2], np.int64),
                                                  minval=np.int32(5), maxval=np.int32(5))
    session = gr.Session(graph)
    assert session.run(values, {shape: [0]}).shape == (0,)
    with pytest.raises(ExecutionError, match="Need minval < maxval, got 5 >= 5"):
        session.run(values, {shape: [2]})


def test_unsigned_uniform_int_v2_has_no_kernel_as_in_tensorflow(graph):
    key, counter = _key_counter()
    values = gr.raw_ops.StatelessRandomUniformIntV2(shape=[3], key=key, counter=counter, alg=1,
                                                    minval=np.uint32(1), maxval=np.uint32(9))
    with pytest.raises(GradregError, match="no CPU kernel.*uint32"):
        gr.Session(graph).run(values)


def test_multinomial_refuses_what_tensorflow_refuses(graph):
    logits = gr.placeholder(gr.float32, [None, None])
    samples = gr.placeholder(gr.int32, [])
    drawn = gr.raw_ops.StatelessMultinomial(logits=logits, num_samples=samples, seed=np.array([1, 2], np.int64),
                                            name="draw")
    session = gr.Session(graph)
    assert session.run(drawn, {logits: np.zeros((2, 3), np.float32), samples: 0}).shape == (2, 0)
    with pytest.raises(ExecutionError, match="draw.*num_samples should be non-negative, got -1"):
        session.run(drawn, {logits: np.zeros((2, 3), np.float32), samples: -1})
    with pytest.raises(ExecutionError, match="num_classes should be positive, got 0"):
        session.run(drawn, {logits: np.zeros((2, 0), np.float32), samples: 3})


def _truncated_normal(minval, maxval, shape=(4,), name="truncated"):
    f32 = np.float32
    return gr.raw_ops.StatelessParameterizedTruncatedNormal(
        shape=np.array(shape, np.int32), seed=np.array([1, 2], np.int64), means=f32(0.0), stddevs=f32(1.0),
        minvals=np.asarray(minval, f32), maxvals=np.asarray(maxval, f32), name=name)


def test_parameterized_truncated_normal_refuses_what_tensorflow_refuses(graph):
    with pytest.raises(ExecutionError, match="truncated.*Invalid parameters"):
        gr.Session(graph).run(_truncated_normal(1.0, 1.0))
    with pytest.raises(ExecutionError, match="Invalid parameters"):
        gr.Session(graph).run(_truncated_normal(-np.inf, np.inf, name="unbounded"))
    with pytest.raises(ExecutionError, match="must end with broadcasted shape"):
        gr.Session(graph).run(_truncated_normal([0.0, 0.1], 1.0, shape=(4, 3), name="mismatch"))


def test_parameterized_truncated_normal_stays_within_its_bounds(graph):
    lows, highs = np.array([-0.5, 2.5, -np.inf], np.float32), np.array([0.1, np.inf, -3.0], np.float32)
    values = gr.Session(graph).run(_truncated_normal(lows, highs, shape=(500, 3)))
    assert ((values >= lows) & (values <= highs)).all()
    assert values[:, 1].min() < 2.6 and values[:, 2].max() > -3.1   # the tails are near their bound


def test_element_limit_is_checked_before_sampling(graph):
    key, counter = _key_counter()
    values = gr.raw_ops.StatelessRandomUniformV2(shape=[100_000, 100_000], key=key, counter=counter, alg=1)
    with pytest.raises(gr.errors.ElementLimitError):
        gr.Session(graph).run(values)


# -- gradients -----------------------------------------------------------------------------------

def test_gradient_stops_at_the_sampler(graph):
    x = gr.placeholder(gr.float32, [4])
    key, counter = _key_counter()
    noise = gr.raw_ops.StatelessRandomUniformV2(shape=[4], key=key, counter=counter, alg=1)
    (dx,) = gr.gradients(gr.reduce_sum(x * noise), [x])
    session = gr.Session(graph)
    assert np.array_equal(session.run(dx, {x: np.ones(4, np.float32)}), session.run(noise))


RANDOM_OPS = ["StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounterAlg", "StatelessRandomGetAlg",
              "StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal",
              "StatelessRandomUniformInt", "StatelessRandomUniformFullInt", "StatelessRandomUniformV2",
              "StatelessRandomNormalV2", "StatelessTruncatedNormalV2", "StatelessRandomUniformIntV2",
              "StatelessRandomUniformFullIntV2", "StatelessMultinomial", "RandomUniform", "RandomStandardNormal",
              "TruncatedNormal", "RandomUniformInt", "StatelessParameterizedTruncatedNormal"]


@pytest.mark.tf
def test_gradient_registrations_follow_tensorflow():
    ops = pytest.importorskip("tensorflow.python.framework.ops")
    registry = get_registry()
    for op_type in RANDOM_OPS:
        assert registry.provider_of(op_type) == "random", op_type
        try:
            theirs = ops._gradient_registry.lookup(op_type)
        except LookupError:
            assert registry.gradients.lookup(op_type) is None, op_type
            continue
        ours = registry.gradients.lookup(op_type)
        assert ours is not None and (ours.value is None) == (theirs is None), op_type


# -- the generator and glibc ---------------------------------------------------------------------

def test_skip_keeps_tensorflows_carry_rule():
    state = philox.PhiloxState(7, (0xFFFFFFFF << 32) | 0xFFFFFFFF)
    assert state.skip(1).counter == 1 << 64                     # an ordinary carry into word 2
    # A carry out of word 0 while the count's high half is all ones is lost, as in TensorFlow.
    lost = philox.PhiloxState(7, 0xFFFFFFFF).skip((0xFFFFFFFF << 32) | 1)
    assert lost.counter == 0


def test_blocks_at_offsets_equal_the_stream():
    state = philox.from_seed_pair(3, -9)
    offsets = np.array([5, 0, 9000, 2 ** 40], np.uint64)
    stream = philox.blocks(state, 9001)
    at = philox.blocks_at(state, offsets)
    assert np.array_equal(at[:3], stream[[5, 0, 9000]])
    assert np.array_equal(at[3], philox.blocks(state.skip(2 ** 40), 1)[0])


def _glibc():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("needs glibc")
    major, minor = (int(p) for p in platform.libc_ver()[1].split(".")[:2])
    if (major, minor) < (2, 28):
        pytest.skip("glibc before 2.28 has other logf/sincosf")
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    lib.logf.argtypes, lib.logf.restype = [ctypes.c_float], ctypes.c_float
    lib.sincosf.argtypes = [ctypes.c_float, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float)]
    return lib


def test_logf_and_sincosf_table_reproduces_this_machines_glibc():
    """On 20000 random inputs, every 50th input where glibc departs from correct rounding and
    every input stored outright; the full check over all 2**23 inputs of each function is
    ``python -m gradreg_plugins.random.make_libm_tables --check`` (half a minute)."""
    lib = _glibc()
    tables = libm.load_tables()
    with np.load(libm.TABLE_PATH) as stored:
        outright = [stored[f"{name}_hard_index"] for name in libm.FUNCTIONS]
    k = np.random.default_rng(11).integers(0, libm.MANTISSA_VALUES, 20000).astype(np.uint32)
    k = np.concatenate([k] + [tables[name][0][::50] for name in libm.FUNCTIONS] + outright).astype(np.uint32)
    logs = libm.glibc_logf_of_mantissa(k)
    sines, cosines = libm.glibc_sincosf_of_mantissa(k)
    sin, cos = ctypes.c_float(), ctypes.c_float()
    for i, (u, v) in enumerate(zip(libm.log_input(k).tolist(), libm.angle_input(k).tolist())):
        lib.sincosf(v, ctypes.byref(sin), ctypes.byref(cos))
        got = np.array([logs[i], sines[i], cosines[i]], np.float32)
        want = np.array([lib.logf(u), sin.value, cos.value], np.float32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), int(k[i])
