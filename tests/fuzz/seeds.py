"""The graphs the fuzzer mutates: TensorFlow-written GraphDefs from tests/data and examples/.

Each :class:`Seed` is a small, valid graph with what it takes to run it: feed values, the tensors
to fetch, and optionally ys/xs to differentiate. The multi-case graphs (ops_array, ops_nn,
ops_math) are cut into one seed per case: the nodes a case's fetches need, so a mutant stays
small and runs fast.
"""
from __future__ import annotations

import functools
import gzip
import json
import pathlib
from dataclasses import dataclass, field

import numpy as np

from gradreg.proto import graph_pb2

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
CORPUS = DATA / "tf_corpus"


@dataclass
class Seed:
    """One graph to mutate. ``fetches`` are tensor names; ``grad`` is (ys, xs, grad_ys or None)."""
    name: str
    graph_def: graph_pb2.GraphDef
    feeds: dict[str, np.ndarray]
    fetches: list[str]
    grad: tuple[list[str], list[str], list[str] | None] | None = None
    text: bytes | None = None            # the .pbtxt TensorFlow wrote, when there is one
    weight: float = 1.0                   # how often the campaign picks it
    tags: set[str] = field(default_factory=set)

    @functools.cached_property
    def binary(self) -> bytes:
        return self.graph_def.SerializeToString()


def _parse(path: pathlib.Path) -> graph_pb2.GraphDef:
    graph_def = graph_pb2.GraphDef()
    graph_def.ParseFromString(path.read_bytes())
    return graph_def


def subgraph(graph_def: graph_pb2.GraphDef, fetches: list[str]) -> graph_pb2.GraphDef:
    """The nodes ``fetches`` (tensor names) need through data and control inputs, in the
    original order, with the whole function library."""
    by_name = {n.name: n for n in graph_def.node}
    needed: set[str] = set()
    stack = [f.split(":")[0] for f in fetches]
    while stack:
        name = stack.pop()
        if name in needed or name not in by_name:
            continue
        needed.add(name)
        for text in by_name[name].input:
            stack.append(text.lstrip("^").split(":")[0])
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in needed)
    return out


def _float_names(feeds: dict[str, np.ndarray]) -> list[str]:
    return [k for k, v in feeds.items() if v.dtype.kind == "f"]


def corpus_seeds() -> list[Seed]:
    """The 13 cases of tests/data/tf_corpus: forward graphs with their feeds, ys and xs, and
    TensorFlow's own gradient graphs."""
    seeds = []
    for case_dir in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        meta = json.loads((case_dir / "case.json").read_text())
        with np.load(case_dir / "inputs.npz") as npz:
            feeds = {k: npz[k] for k in meta["feeds"]}
        seeds.append(Seed(f"tf_corpus/{case_dir.name}", _parse(case_dir / "forward.pb"), feeds, list(meta["ys"]),
                          (list(meta["ys"]), list(meta["xs"]), meta["grad_ys"]),
                          text=(case_dir / "forward.pbtxt").read_bytes(), weight=6.0, tags={"corpus"}))
        grads = [t for t in meta["tf_grad_tensors"] if t]
        seeds.append(Seed(f"tf_corpus/{case_dir.name}/tf_grad", _parse(case_dir / "tf_grad.pb"), feeds,
                          list(meta["ys"]) + grads, weight=3.0, tags={"corpus", "tf_grad"}))
    return seeds


def ops_array_seeds() -> list[Seed]:
    """The cases of tests/data/ops_array (one subgraph each) that TensorFlow ran without error."""
    directory = DATA / "ops_array"
    cases = json.loads((directory / "ops.json").read_text())
    graph_def = _parse(directory / "ops.pb")
    seeds = []
    with np.load(directory / "ops.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    for case in cases:
        if case.get("error"):
            continue
        feeds = {name: arrays[f"{case['name']}/feed/{i}"] for i, name in enumerate(case["feeds"])}
        floats = _float_names(feeds)
        fetch_floats = [f for f, d in zip(case["fetches"], case["dtypes"]) if d in ("float32", "float64")]
        grad = (fetch_floats, floats, None) if floats and fetch_floats else None
        seeds.append(Seed(f"ops_array/{case['name']}", subgraph(graph_def, case["fetches"]), feeds,
                          list(case["fetches"]), grad, tags={"op"}))
    return seeds


def ops_nn_seeds() -> list[Seed]:
    """The cases of tests/data/ops_nn (one subgraph each)."""
    directory = DATA / "ops_nn"
    meta = json.loads((directory / "reference.json").read_text())
    with np.load(directory / "reference.npz") as npz:
        buffers = {k: npz[k] for k in npz.files}

    def array(key: str) -> np.ndarray:
        dtype, offset, shape = meta["arrays"][key]
        return buffers[dtype][offset:offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)

    graphs: dict[str, graph_pb2.GraphDef] = {}
    seeds = []
    for name, case in sorted(meta["cases"].items()):
        group = case["group"]
        if group not in graphs:
            graphs[group] = _parse(directory / f"{group}.pb")
        feeds = {t: array(key) for t, key in case["feeds"].items()}
        floats = _float_names(feeds)
        grad = (list(case["fetches"]), floats, None) if floats and not case["bfloat16"] else None
        seeds.append(Seed(f"ops_nn/{name}", subgraph(graphs[group], case["fetches"]), feeds,
                          list(case["fetches"]), grad, tags={"op"}))
    return seeds


def ops_math_seeds() -> list[Seed]:
    """The cases of tests/data/ops_math (one subgraph each) with a fetch and no expected error;
    random ops are left out (their values differ between runs)."""
    directory = DATA / "ops_math"
    cases = json.loads(gzip.decompress((directory / "cases.json.gz").read_bytes()))
    graph_def = _parse(directory / "graph.pb")
    with np.load(directory / "values.npz") as npz:
        flat = {k: npz[k] for k in npz.files}

    def unpack(ref: dict) -> np.ndarray:
        shape = tuple(ref["shape"])
        if "strings" in ref:
            return np.array([s.encode("latin-1") for s in ref["strings"]], dtype=object).reshape(shape)
        n = int(np.prod(shape, dtype=np.int64))
        return flat[ref["dtype"]][ref["offset"]:ref["offset"] + n].reshape(shape)

    seeds = []
    for case in cases:
        fetches = [f["name"] for f in case.get("fetches", []) if "value" in f]
        if not fetches or case.get("error") or "Random" in case.get("op", "") or "Multinomial" in case.get("op", ""):
            continue
        feeds = {t: unpack(ref) for t, ref in case.get("feeds", {}).items()}
        floats = [k for k, v in feeds.items() if v.dtype in (np.float32, np.float64)]
        grad_fetches = [f["name"] for f in case["fetches"] if f.get("dtype") in ("float32", "float64")]
        grad = (grad_fetches, floats, None) if floats and grad_fetches else None
        seeds.append(Seed(f"ops_math/{case['name']}", subgraph(graph_def, fetches), feeds, fetches, grad,
                          weight=0.5, tags={"op"}))
    return seeds


def example_seeds() -> list[Seed]:
    """examples/mlp: a text GraphDef TensorFlow wrote, with its inputs."""
    directory = REPO / "examples" / "mlp"
    from google.protobuf import text_format
    text = (directory / "model.pbtxt").read_bytes()
    graph_def = text_format.Parse(text.decode(), graph_pb2.GraphDef())
    with np.load(directory / "inputs.npz") as npz:
        feeds = {k: npz[k] for k in npz.files}
    return [Seed("examples/mlp", graph_def, feeds, ["loss:0"], (["loss:0"], ["w1:0", "b1:0", "w2:0", "b2:0"], None),
                 text=text, weight=3.0, tags={"corpus"})]


def rnn_seeds() -> list[Seed]:
    """bench/graphs/rnn_tf1: issue 14's RNN as TensorFlow wrote it (a v1 while_loop reading xs[t]
    through W: the loop hoist, the loop gradient's iteration sums and stacks), with its feeds."""
    directory = REPO / "bench" / "graphs" / "rnn_tf1"
    with np.load(directory / "feeds.npz") as npz:
        feeds = {k: npz[k] for k in npz.files}
    return [Seed("bench/rnn_tf1", _parse(directory / "forward.pb"), feeds, ["loss:0"],
                 (["loss:0"], ["xs:0", "W:0", "U:0"], None), weight=3.0, tags={"corpus"})]


@functools.cache
def all_seeds() -> tuple[Seed, ...]:
    """Every seed, corpus cases first."""
    return tuple(corpus_seeds() + example_seeds() + rnn_seeds() + ops_array_seeds() + ops_nn_seeds()
                 + ops_math_seeds())
