"""Generate TensorFlow reference data for the random family's tests (needs the ``tf`` extra:
tensorflow-cpu 2.21 and the keras it installs).

    python tests/data/random/make_reference.py

Writes next to this script:

* ``stateless.pb`` — a GraphDef of the stateless ops (v1 and V2, every dtype, int32 and int64
  seeds, output sizes that are not multiples of four, counters whose low word wraps, large
  outputs that cross gradreg's chunk boundaries, StatelessMultinomial with non-finite
  logits, StatelessParameterizedTruncatedNormal by each of its sampling methods), all inputs
  constants. TensorFlow runs with one intra-op thread: with more, its values for the large
  StatelessMultinomial and StatelessParameterizedTruncatedNormal cases depend on the thread
  count;
* ``stateful.pb`` — RandomUniform, RandomStandardNormal, TruncatedNormal, RandomUniformInt
  with seed attrs, and tf.nn.dropout with a graph seed, as TensorFlow 1 graph mode builds
  them; TensorFlow ran the graph three times in one session (the generators advance);
* ``keras_dropout.pb``, ``keras_initializers.pb`` — Keras 3 graphs: Dropout(seed=...) layers
  in training mode, and initializers with seeds (GlorotUniform, HeNormal, ...). Keras' dropout keeps its seed in a
  variable that every call advances, which TensorFlow's freezer refuses to fold; this script
  freezes it by hand (the read becomes a constant of the value TensorFlow used, the write
  is dropped) and checks that TensorFlow, running the frozen graph, gives the same values;
* ``reference.json`` / ``reference.npz`` — per case: graph, fetch names, run index, and
  TensorFlow's output (packed, see :func:`pack`; bfloat16 stored as float32, exactly).
  Large outputs keep every ``stride``-th value and the last 64 (``keep`` in the case).
"""
from __future__ import annotations

import json
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = pathlib.Path(__file__).parent
raw = tf.raw_ops
tf1 = tf.compat.v1
BFLOAT16 = tf.bfloat16.as_numpy_dtype
FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]

SEEDS = [((1, 2), tf.int32), ((-1, -2), tf.int32), ((0, 0), tf.int64), ((2 ** 40 + 3, -2 ** 62), tf.int64),
         ((12345, 67890), tf.int64), ((-7, 2 ** 31 - 1), tf.int32)]
SHAPES = [[], [1], [3], [5], [7], [2, 3], [3, 1, 4], [0], [37], [4, 33]]
# Counters for the V2 ops: their own, one whose low word wraps within the output, all ones.
COUNTERS = [None, [2 ** 64 - 5, 7], [2 ** 64 - 1, 2 ** 64 - 1]]
INT_RANGES = {tf.int32: [(-5, 17), (0, 2 ** 31 - 1), (-2 ** 31, 2 ** 31 - 1), (7, 8)],
              tf.int64: [(-5, 17), (-2 ** 62, 2 ** 62), (-2 ** 63, 2 ** 63 - 1), (10 ** 12, 10 ** 12 + 3)]}
LARGE_STRIDE = 37


def storable(value) -> np.ndarray:
    value = np.asarray(value)
    return value.astype(np.float32) if value.dtype == BFLOAT16 else value


def pack(arrays: dict) -> tuple[dict, dict]:
    """Arrays packed into one flat buffer per dtype; index maps each key to [dtype, offset, shape]."""
    buffers: dict[str, list] = {}
    sizes: dict[str, int] = {}
    index = {}
    for key, value in arrays.items():
        value = np.asarray(value)
        name = value.dtype.name
        index[key] = [name, sizes.get(name, 0), list(value.shape)]
        buffers.setdefault(name, []).append(value.reshape(-1))
        sizes[name] = sizes.get(name, 0) + value.size
    return {name: np.concatenate(parts) for name, parts in buffers.items()}, index


class Cases:
    """Collects cases: fetch names per graph, TensorFlow's values after running."""

    def __init__(self):
        self.cases: list[dict] = []
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, graph: str, name: str, fetch: str, value, run: int = 0, keep: int | None = None) -> None:
        value = storable(value)
        case = {"graph": graph, "name": name, "fetch": fetch, "run": run, "dtype": str(value.dtype),
                "shape": list(value.shape)}
        if keep is not None:
            case["keep"] = keep
            flat = value.reshape(-1)
            value = np.concatenate([flat[::keep], flat[-64:]])
        key = f"{graph}/{name}/{run}"
        case["array"] = key
        self.arrays[key] = value
        self.cases.append(case)

    def write(self) -> None:
        buffers, index = pack(self.arrays)
        (HERE / "reference.json").write_text(json.dumps({"cases": self.cases, "arrays": index}, indent=0))
        np.savez_compressed(HERE / "reference.npz", **buffers)


def save(graph_def, name: str) -> None:
    (HERE / f"{name}.pb").write_bytes(graph_def.SerializeToString())


# -- stateless ---------------------------------------------------------------------------------

def _seed(i: int):
    values, dtype = SEEDS[i % len(SEEDS)]
    return tf.constant(values, dtype)


def _key_counter(i: int, counter):
    if counter is None:
        key, ctr = raw.StatelessRandomGetKeyCounter(seed=_seed(i))
        return key, ctr
    key, _ = raw.StatelessRandomGetKeyCounter(seed=_seed(i))
    return key, tf.constant(np.array(counter, np.uint64))


def _stateless_floats(fetches: list, i: int) -> int:
    """The v1 and V2 float ops; the next case index."""
    for op_name in ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal"):
        for dtype in FLOATS:
            for _ in range(4):
                shape = SHAPES[i % len(SHAPES)]
                t = getattr(raw, op_name)(shape=tf.constant(shape, tf.int32 if i % 2 else tf.int64),
                                          seed=_seed(i), dtype=dtype)
                fetches.append((f"{op_name}_{dtype.name}_{i}", t, None))
                i += 1
    for v2, alg in (("StatelessRandomUniformV2", 1), ("StatelessRandomNormalV2", 3),
                    ("StatelessTruncatedNormalV2", 1)):
        for dtype in FLOATS:
            for counter in COUNTERS:
                shape = SHAPES[i % len(SHAPES)] or [6]
                key, ctr = _key_counter(i, counter)
                t = getattr(raw, v2)(shape=shape, key=key, counter=ctr, alg=alg, dtype=dtype)
                fetches.append((f"{v2}_{dtype.name}_{i}", t, None))
                i += 1
    return i


def _stateless_ints(fetches: list, i: int) -> int:
    """The integer ops (ranged and full-range, v1 and V2); the next case index."""
    for dtype, ranges in INT_RANGES.items():
        for lo, hi in ranges:
            shape = SHAPES[i % len(SHAPES)] or [9]
            t = raw.StatelessRandomUniformInt(shape=shape, seed=_seed(i), minval=tf.constant(lo, dtype),
                                              maxval=tf.constant(hi, dtype))
            fetches.append((f"StatelessRandomUniformInt_{dtype.name}_{i}", t, None))
            key, ctr = _key_counter(i, COUNTERS[i % len(COUNTERS)])
            t = raw.StatelessRandomUniformIntV2(shape=shape, key=key, counter=ctr, alg=1,
                                                minval=tf.constant(lo, dtype), maxval=tf.constant(hi, dtype))
            fetches.append((f"StatelessRandomUniformIntV2_{dtype.name}_{i}", t, None))
            i += 1
    for dtype in (tf.int32, tf.int64, tf.uint32, tf.uint64):
        for _ in range(2):
            shape = SHAPES[i % len(SHAPES)] or [5]
            t = raw.StatelessRandomUniformFullInt(shape=shape, seed=_seed(i), dtype=dtype)
            fetches.append((f"StatelessRandomUniformFullInt_{dtype.name}_{i}", t, None))
            key, ctr = _key_counter(i, COUNTERS[i % len(COUNTERS)])
            t = raw.StatelessRandomUniformFullIntV2(shape=shape, key=key, counter=ctr, alg=3, dtype=dtype)
            fetches.append((f"StatelessRandomUniformFullIntV2_{dtype.name}_{i}", t, None))
            i += 1
    return i


def _stateless_multinomials(fetches: list, i: int, logits_rng: np.random.RandomState) -> int:
    """StatelessMultinomial over float types, with weightless (-inf, inf, nan) logits and empty
    shapes; the next case index."""
    for dtype, (batch, classes, samples), out_type in ((tf.float32, (4, 10, 20), tf.int64),
                                                       (tf.float64, (1, 3, 257), tf.int32),
                                                       (tf.float16, (3, 6, 9), tf.int64),
                                                       (tf.bfloat16, (2, 5, 11), tf.int32),
                                                       (tf.float32, (2, 4, 0), tf.int64),
                                                       (tf.float32, (0, 4, 3), tf.int64)):
        logits = logits_rng.standard_normal((batch, classes)) * 2
        if batch and classes > 4:
            logits[0, :3] = [-np.inf, np.inf, np.nan]    # weigh nothing
        t = raw.StatelessMultinomial(logits=tf.constant(logits, dtype), num_samples=samples, seed=_seed(i),
                                     output_dtype=out_type)
        fetches.append((f"StatelessMultinomial_{dtype.name}_{i}", t, None))
        i += 1
    return i


# StatelessParameterizedTruncatedNormal: (name, shape, means, stddevs, minvals, maxvals), one per
# sampling method TensorFlow picks from the bounds (normal, uniform or exponential proposals,
# the mirrored lower tail), parameters broadcast against each other, and outputs large enough
# that TensorFlow's thread pool would split them (one intra-op thread: see main()).
TRUNCATED = [("normal", [2, 3], [0.0, 1.0, -1.0], [1.0, 2.0, 0.5], -3.0, [3.0, 3.0, 4.0]),
             ("uniform", [5, 2], 0.0, 1.0, [0.5, 0.2], [0.8, 0.6]),
             ("exponential", [7], 0.0, 1.0, 2.5, np.inf),
             ("lower_tail", [6], 0.0, 1.0, -np.inf, -2.0),
             ("above_mean", [6], 3.0, 1.0, -1.0, 1.0),
             ("broadcast", [4, 2, 3], [0.0, 1.0, 2.0], 1.5, [[-1.0], [0.0]], 4.0),
             ("large", [100, 10], 0.0, 1.0, -1.0, 2.0),
             ("large_exponential", [300, 4], 1.0, 2.0, [5.0, 6.0, 7.0, 8.0], np.inf)]


def _parameterized_truncated_normals(fetches: list, i: int) -> int:
    for dtype in (tf.float16, tf.float32, tf.float64):
        for name, shape, *params in TRUNCATED:
            means, stddevs, minvals, maxvals = (tf.constant(p, dtype) for p in params)
            t = raw.StatelessParameterizedTruncatedNormal(shape=shape, seed=_seed(i), means=means, stddevs=stddevs,
                                                          minvals=minvals, maxvals=maxvals)
            fetches.append((f"StatelessParameterizedTruncatedNormal_{name}_{dtype.name}_{i}", t, None))
            i += 1
    return i


def stateless_graph(cases: Cases) -> None:
    graph = tf.Graph()
    fetches: list = []   # (name, tensor, keep)
    with graph.as_default():
        i = _stateless_floats(fetches, 0)
        i = _stateless_ints(fetches, i)
        for j in range(len(SEEDS)):
            key, counter, alg = raw.StatelessRandomGetKeyCounterAlg(seed=_seed(j))
            fetches += [(f"GetKeyCounterAlg_key_{j}", key, None), (f"GetKeyCounterAlg_counter_{j}", counter, None),
                        (f"GetKeyCounterAlg_alg_{j}", alg, None)]
        fetches.append(("GetAlg", raw.StatelessRandomGetAlg(), None))
        logits_rng = np.random.RandomState(5)
        i = _stateless_multinomials(fetches, i, logits_rng)
        i = _parameterized_truncated_normals(fetches, i)
        # Large enough that TensorFlow splits the rows among its threads unless it has one.
        large_logits = tf.constant(logits_rng.standard_normal((60, 20)), tf.float32)
        single_thread = raw.StatelessMultinomial(logits=large_logits, num_samples=100, seed=_seed(3))
        # Outputs spanning several of gradreg's 32768-block chunks (and 2250 truncated groups).
        for op_name, dtype, n in (("StatelessRandomUniform", tf.float32, 140000),
                                  ("StatelessRandomNormal", tf.float32, 140000),
                                  ("StatelessRandomNormal", tf.float64, 20000),
                                  ("StatelessTruncatedNormal", tf.float32, 9001),
                                  ("StatelessTruncatedNormal", tf.float64, 3001),
                                  ("StatelessRandomUniformFullInt", tf.int64, 70001)):
            t = getattr(raw, op_name)(shape=[n], seed=_seed(n), dtype=dtype)
            fetches.append((f"large_{op_name}_{dtype.name}_{n}", t, LARGE_STRIDE))
    with tf1.Session(graph=graph) as sess:
        values = sess.run([t for _, t, _ in fetches])
    for (name, t, keep), value in zip(fetches, values):
        cases.add("stateless", name, t.name, value, keep=keep)
    with tf1.Session(graph=graph) as sess:   # one intra-op thread: see main()
        cases.add("stateless", "StatelessMultinomial_one_thread_60x20", single_thread.name,
                  sess.run(single_thread), keep=LARGE_STRIDE)
    save(graph.as_graph_def(), "stateless")


# -- stateful ---------------------------------------------------------------------------------

def stateful_graph(cases: Cases) -> None:
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(2024)
        fetches = [
            ("RandomUniform_float32", raw.RandomUniform(shape=[5, 3], dtype=tf.float32, seed=1, seed2=2)),
            ("RandomUniform_bfloat16", raw.RandomUniform(shape=[7], dtype=tf.bfloat16, seed=0, seed2=5)),
            ("RandomUniform_float64", raw.RandomUniform(shape=[3], dtype=tf.float64, seed=-4, seed2=0)),
            ("RandomStandardNormal_float64", raw.RandomStandardNormal(shape=[6], dtype=tf.float64, seed=7, seed2=0)),
            ("RandomStandardNormal_float16", raw.RandomStandardNormal(shape=[9], dtype=tf.float16, seed=7, seed2=8)),
            ("TruncatedNormal_float32", raw.TruncatedNormal(shape=[11], dtype=tf.float32, seed=0, seed2=9)),
            ("TruncatedNormal_float64", raw.TruncatedNormal(shape=[2, 3], dtype=tf.float64, seed=5, seed2=6)),
            ("RandomUniformInt_int64", raw.RandomUniformInt(shape=[9], minval=tf.constant(-10, tf.int64),
                                                            maxval=tf.constant(10 ** 12, tf.int64), seed=3, seed2=4)),
            ("RandomUniformInt_int32", raw.RandomUniformInt(shape=[4], minval=-3, maxval=4, seed=3, seed2=5)),
            # tf.nn.dropout draws a RandomUniform seeded from the graph seed and its op seed.
            ("dropout", tf1.nn.dropout(tf.ones([4, 6]), rate=0.5, seed=11)),
            ("random_normal", tf1.random_normal([5], seed=3)),
        ]
    with tf1.Session(graph=graph) as sess:
        for run in range(3):
            values = sess.run([t for _, t in fetches])
            for (name, t), value in zip(fetches, values):
                cases.add("stateful", name, t.name, value, run=run)
    save(graph.as_graph_def(), "stateful")


# -- Keras ------------------------------------------------------------------------------------

def _freeze_by_hand(concrete, values: dict):
    """The concrete function's GraphDef with each captured variable's reads replaced by a
    constant of ``values[id(handle)]`` (the variable's value) and its writes removed."""
    graph_def = concrete.graph.as_graph_def()
    handles = {}
    for handle, placeholder in concrete.graph.captures:
        handles[placeholder.op.name] = values[id(handle)]
    kept, dropped = [], set()
    for node in graph_def.node:
        if node.op == "Placeholder" and node.name in handles:
            dropped.add(node.name)
        elif node.op == "ReadVariableOp" and node.input[0] in handles:
            const = tf1.NodeDef(name=node.name, op="Const")
            value = handles[node.input[0]]
            const.attr["dtype"].type = node.attr["dtype"].type
            const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            kept.append(const)
        elif node.op.startswith("Assign") and node.input[0] in handles:
            dropped.add(node.name)
        else:
            kept.append(node)
    for node in kept:
        inputs = [i for i in node.input if i.lstrip("^").split(":")[0] not in dropped]
        del node.input[:]
        node.input.extend(inputs)
    out = tf1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(kept)
    return out


def _run_frozen(graph_def, feeds: dict, fetch: str):
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    with tf1.Session(graph=graph) as sess:
        return sess.run(fetch, feeds)


def keras_dropout(cases: Cases) -> None:
    """Three Dropout layers in training mode on one input, one frozen graph."""
    import keras
    x_value = np.random.RandomState(7).standard_normal((3, 6, 5)).astype(np.float32)
    layers = {"dropout": keras.layers.Dropout(0.4, seed=42),
              "dropout_noise_shape": keras.layers.Dropout(0.25, noise_shape=(None, 1, 5), seed=7),
              "dropout_large_seed": keras.layers.Dropout(0.6, seed=1234567)}
    inputs = keras.Input((6, 5))
    model = keras.Model(inputs, [layer(inputs, training=True) for layer in layers.values()])
    model(x_value, training=True)     # one call first: the seed states move on, as in training
    concrete = tf.function(lambda x: model(x, training=True)).get_concrete_function(
        tf.TensorSpec([3, 6, 5], tf.float32))
    state = {id(v.handle): v.numpy() for layer in layers.values() for v in layer.variables}
    expected = [t.numpy() for t in concrete(tf.constant(x_value))]
    frozen = _freeze_by_hand(concrete, state)
    feed = concrete.inputs[0].name
    fetches = [t.name for t in concrete.outputs]
    again = _run_frozen(frozen, {feed: x_value}, fetches)
    assert all(np.array_equal(a, b) for a, b in zip(again, expected)), "the hand-frozen graph differs from TF's run"
    save(frozen, "keras_dropout")
    cases.add("keras_dropout", "input", feed, x_value)
    for name, fetch, value in zip(layers, fetches, expected):
        cases.add("keras_dropout", name, fetch, value)


def keras_initializers(cases: Cases) -> None:
    """Seeded initializers, float32 and float64, traced into one graph."""
    import keras
    inits = {
        "glorot_uniform": keras.initializers.GlorotUniform(seed=3),
        "he_normal": keras.initializers.HeNormal(seed=4),
        "lecun_normal": keras.initializers.LecunNormal(seed=5),
        "random_normal": keras.initializers.RandomNormal(mean=1.0, stddev=0.5, seed=6),
        "random_uniform": keras.initializers.RandomUniform(-0.1, 0.3, seed=2 ** 40),
        "truncated_normal": keras.initializers.TruncatedNormal(stddev=2.0, seed=8),
        "variance_scaling": keras.initializers.VarianceScaling(2.0, "fan_avg", "untruncated_normal", seed=9),
    }
    calls = [(f"{name}_{dtype}", init, shape, dtype) for name, init in inits.items()
             for shape, dtype in (((4, 5), "float32"), ((3, 3, 2, 7), "float64"))]
    traced = tf.function(lambda: [init(shape, dtype=dtype) for _, init, shape, dtype in calls])
    concrete = traced.get_concrete_function()
    expected = [t.numpy() for t in concrete()]
    save(concrete.graph.as_graph_def(), "keras_initializers")
    for (name, *_), t, value in zip(calls, concrete.outputs, expected):
        cases.add("keras_initializers", name, t.name, value)


def main() -> None:
    # Above a size, TensorFlow's StatelessMultinomial and StatelessParameterizedTruncatedNormal
    # values depend on its intra-op thread count (each thread starts its share at another
    # stream offset); with one they are gradreg's. Every other op here gives the same values
    # whatever the thread count.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    cases = Cases()
    stateless_graph(cases)
    stateful_graph(cases)
    keras_dropout(cases)
    keras_initializers(cases)
    cases.write()
    print(f"{len(cases.cases)} cases written to {HERE}")


if __name__ == "__main__":
    main()
