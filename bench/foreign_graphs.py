"""The TF-written benchmark graphs in bench/graphs (written by make_graphs.py; no TensorFlow needed).

    from foreign_graphs import graph_path, feeds, manifest
    entry = manifest()["rnn_tf1"]          # feeds, fetches, xs, tf_grad_tensors, ...
    graph = gr.load_graph(str(graph_path("rnn_tf1", "tf_grad.pb")))
    gr.Session(graph).run(entry["tf_grad_tensors"], feeds("rnn_tf1", grad_ys=True))

Large inputs whose values do not matter for timing are not stored but computed here (the same
arrays every call): the elementwise chain's x, and the MLP's initial weights, which a benchmark
feeds to the initializer tensors (`init_feeds`) so that every contender starts from the same point.
"""
from __future__ import annotations

import json
import os
import pathlib

import numpy as np

# GRADREG_BENCH_GRAPHS: another directory of graph sets (bench/realistic.py's large ones)
GRAPHS = pathlib.Path(os.environ.get("GRADREG_BENCH_GRAPHS") or pathlib.Path(__file__).resolve().parent / "graphs")


def manifest() -> dict:
    """{graph set name: its entry} (see make_graphs.py)."""
    data = json.loads((GRAPHS / "manifest.json").read_text())
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def graph_path(name: str, file: str = "forward.pb") -> pathlib.Path:
    return GRAPHS / name / file


def _generated(name: str) -> dict:
    if name == "elementwise_chain":
        return {"x:0": np.linspace(-2.0, 2.0, 1 << 20, dtype=np.float32)}
    return {}


def feeds(name: str, grad_ys: bool = False) -> dict:
    """The feed dict of graph set `name` (tensor name -> array); with grad_ys=True also the
    cotangents tf_grad.pb takes (the CNNs' grad_ys_0)."""
    entry = manifest()[name]
    wanted = set(entry["feeds"]) | (set(entry.get("grad_ys") or []) if grad_ys else set())
    with np.load(GRAPHS / name / "feeds.npz") as stored:
        values = {k: stored[k] for k in stored.files if k in wanted}
    values.update(_generated(name))
    return values


def expected(name: str) -> dict:
    """TensorFlow's values for the stored feeds, where make_graphs.py recorded them ({tensor: array})."""
    with np.load(GRAPHS / name / "feeds.npz") as stored:
        return {k[len("expected/"):]: stored[k] for k in stored.files if k.startswith("expected/")}


def init_feeds(name: str) -> dict:
    """Initial values for a TF1 graph's variables, keyed by the initializer tensors to feed with
    the init op: glorot-uniform kernels and small biases from a fixed seed."""
    entry = manifest()[name]
    rng = np.random.default_rng(1)
    values = {}
    for tensor, shape in entry.get("init_feeds", {}).items():
        limit = np.sqrt(6.0 / sum(shape)) if len(shape) == 2 else 0.1
        values[tensor] = rng.uniform(-limit, limit, shape).astype(np.float32)
    return values

