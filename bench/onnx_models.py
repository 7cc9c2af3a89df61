"""The onnx family on PyTorch-exported ONNX models (tests/data/onnx_models): load, differentiate,
run, write back, and the first command in a new process.

    python bench/onnx_models.py [--repeats 5] [--cases resnet_opset18,transformer_opset18]

In this process, per case, medians (and min-max) over --repeats of:

* ``load``: ``gradreg.load_graph(model.onnx)`` (checker, opset conversion, shape inference,
  import) into a fresh graph;
* ``grad``: ``gradients(outputs, every graph input and initializer, grad_ys=cotangents)`` on a
  freshly loaded graph (building only);
* ``first run``: a new Session's first run of the outputs and gradients (plan compilation,
  kernel set-up, the run);
* ``run``: the same Session's later runs (steady state);
* ``save``: ``graph_to_model`` of the outputs and gradients (exporter, full checker).

Then ``gradreg inspect model.onnx`` and ``gradreg grad model.onnx -o grad.onnx`` as whole
commands in new processes (Python start-up, imports, the onnx family's completion), medians of --repeats.
No targets: this is the before/after measure for changes to the onnx family's layout.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
from onnx_models import load_case  # noqa: E402

import gradreg as gr  # noqa: E402
from gradreg_plugins.onnx.format import graph_to_model  # noqa: E402

DEFAULT_CASES = ("resnet_opset18", "mobilenetv2_opset18", "transformer_opset18", "lstm_opset18")


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def differentiated(case):
    graph = gr.load_graph(str(case.model_path))
    ys = [graph.get_tensor(n) for n in case.meta["outputs"]]
    xs = [graph.get_tensor(n) for n in case.meta["xs"]]
    cotangents = case.cotangents()
    with graph.as_default():
        seeds = [gr.constant(cotangents[n]) for n in case.meta["outputs"]]
    seconds, grads = timed(lambda: gr.gradients(ys, xs, grad_ys=seeds))
    return graph, ys, grads, seconds


def one_repeat(name: str, case) -> dict[str, float]:
    figures = {"load": timed(lambda: gr.load_graph(str(case.model_path)))[0]}
    graph, ys, grads, figures["grad"] = differentiated(case)
    session = gr.Session(graph)
    fetches = list(ys) + list(grads)
    figures["first run"], values = timed(lambda: session.run(fetches, case.feeds()))
    for want, got in zip(case.meta["xs"], values[len(ys):]):   # a wrong figure is no figure
        expected = case.gradients()[want]
        if not np.allclose(got, expected, rtol=2e-3, atol=2e-3 * max(float(np.abs(expected).max()), 1.0)):
            raise AssertionError(f"{name}: the gradient for {want} is wrong")
    figures["run"] = statistics.median(timed(lambda: session.run(fetches, case.feeds()))[0] for _ in range(3))
    outputs = {f"y{i}": t for i, t in enumerate(ys)} | {f"g{i}": t for i, t in enumerate(grads)}
    figures["save"] = timed(lambda: graph_to_model(graph, outputs))[0]
    return figures


def measure_case(name: str, repeats: int) -> dict[str, list[float]]:
    case = load_case(name)
    samples: dict[str, list[float]] = {}
    for _ in range(repeats):
        for label, seconds in one_repeat(name, case).items():
            samples.setdefault(label, []).append(seconds)
    return samples


def command_seconds(args: list[str], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats + 1):   # the first writes Python's bytecode cache: not counted
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gradreg", *args], check=True, capture_output=True, cwd=ROOT)
        out.append(time.perf_counter() - start)
    return out[1:]


def show(label: str, values: list[float]) -> None:
    print(f"  {label:<22} {statistics.median(values) * 1000:9.1f} ms   "
          f"({min(values) * 1000:.1f} - {max(values) * 1000:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    args = parser.parse_args()
    for name in args.cases.split(","):
        print(name)
        for label, values in measure_case(name, args.repeats).items():
            show(label, values)
    case = load_case("resnet_opset18")
    xs = ",".join(case.meta["xs"][:2])
    print("commands (resnet_opset18, new processes)")
    show("gradreg inspect", command_seconds(["inspect", str(case.model_path)], args.repeats))
    with tempfile.TemporaryDirectory() as tmp:
        out = str(pathlib.Path(tmp) / "grad.onnx")
        show("gradreg grad -o grad.onnx", command_seconds(["grad", str(case.model_path), "--ys",
                                                           case.meta["outputs"][0], "--xs", xs, "-o", out],
                                                          args.repeats))


if __name__ == "__main__":
    main()
