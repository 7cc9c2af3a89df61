"""What the onnx::Conv kernel's screen for repeated filters costs, at ResNet-50 and MobileNetV2
layer sizes (batch 1, float32, random filters: no two equal, as in a trained model).

    python bench/onnx_conv.py [--repeats 41] [--batch 1] [--clock wall|cpu] [--models]
    OPENBLAS_NUM_THREADS=1 python bench/onnx_conv.py --clock cpu     # the steadiest on a busy machine

Per layer, a one-node Conv model runs in a Session, round-robin with the same Session whose kernel
skips the screen (``distinct_filters`` replaced by one returning None: the kernel as it was before
the screen), the two taking turns at going first. ``--models`` does the same for whole models: the
PyTorch-exported ResNet and MobileNetV2 of tests/data/onnx_models (trained-like random weights) and
onnx's light ResNet-50 and SqueezeNet (every filter 0.02: the screen finds them all repeated).
``--clock cpu`` times the process's CPU time (with one BLAS thread, what the run itself cost,
whatever else the machine runs). Printed: each one's median ms per run (with the
10th-90th percentile), the median of the per-round ratios screened/unscreened (with its
10th-90th percentile), and the screen alone (``distinct_filters`` on the layer's filter matrix,
median us, and as a share of the unscreened run; for a model, all its Conv nodes' screens in
one run).

``--against DIR`` compares this checkout with another (``/work/main``: gradreg and its plugins
from DIR and DIR/plugins) instead, each in processes of its own taking turns (``_timing.
process_medians``, 3 processes each, CPU time), for the same layers and the two tests/data models.
No target: the screen should be lost in the run-to-run spread.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnx
from _timing import Contender, process_medians, report_load
from onnx import TensorProto, helper

import gradreg as gr
from gradreg_plugins.onnx import kernels
from gradreg_plugins.onnx.format import load_onnx

# name: (input channels, spatial size, output channels, kernel, stride, group)
LAYERS = {
    "resnet conv1 7x7/2 3->64 @224": (3, 224, 64, 7, 2, 1),
    "resnet 1x1 64->64 @56": (64, 56, 64, 1, 1, 1),
    "resnet 3x3 64->64 @56": (64, 56, 64, 3, 1, 1),
    "resnet 1x1 64->256 @56": (64, 56, 256, 1, 1, 1),
    "resnet 3x3 256->256 @14": (256, 14, 256, 3, 1, 1),
    "resnet 3x3 512->512 @7": (512, 7, 512, 3, 1, 1),
    "resnet 1x1 512->2048 @7": (512, 7, 2048, 1, 1, 1),
    "resnet 1x1 2048->512 @7": (2048, 7, 512, 1, 1, 1),
    "mobilenet 3x3/2 3->32 @224": (3, 224, 32, 3, 2, 1),
    "mobilenet 1x1 32->16 @112": (32, 112, 16, 1, 1, 1),
    "mobilenet 1x1 96->24 @56": (96, 56, 24, 1, 1, 1),
    "mobilenet dw 3x3 144 @56": (144, 56, 144, 3, 1, 144),
    "mobilenet 1x1 960->160 @7": (960, 7, 160, 1, 1, 1),
    "mobilenet 1x1 320->1280 @7": (320, 7, 1280, 1, 1, 1),
    "squeeze-excite 1x1 576->144 @1": (576, 1, 144, 1, 1, 1),
    "squeezenet conv10 1x1 512->1000 @13": (512, 13, 1000, 1, 1, 1),
}


def conv_session(c: int, size: int, m: int, k: int, stride: int, group: int, batch: int):
    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.05, size=(m, c // group, k, k)).astype(np.float32)
    b = rng.normal(size=m).astype(np.float32)
    out = (size + 2 * (k // 2) - k) // stride + 1
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride], group=group,
                            pads=[k // 2] * 4)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [batch, c, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, m, out, out])],
                              initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    g = load_onnx(model)
    x = rng.normal(size=(batch, c, size, size)).astype(np.float32)
    session = gr.Session(g)
    return (lambda: session.run(["y"], {"x": x})), w.reshape(m, -1) if group == 1 else None


def layer_step(name: str, batch: int = 1):
    """A contender of --against: one layer's run."""
    return conv_session(*LAYERS[name], batch=batch)[0]


def model_step(name: str):
    """A contender of --against: one model's run."""
    return model_session(name)


def against(other: str, batch: int, rounds: int) -> None:
    """This checkout's runs against those of the checkout at ``other``, process by process."""
    env = {"PYTHONPATH": f"{other}{os.pathsep}{os.path.join(other, 'plugins')}"}
    print(f"{'':38s} {'this ms (p10-p90)':>24s} {'other ms (p10-p90)':>24s} {'ratio':>6s}   {report_load()}")
    cases = [("onnx_conv:layer_step", {"name": n, "batch": batch}) for n in LAYERS]
    cases += [("onnx_conv:model_step", {"name": n}) for n in ("case:resnet_opset18", "case:mobilenetv2_opset18")]
    for factory, kwargs in cases:
        figures = process_medians([Contender("this", factory, kwargs), Contender("other", factory, kwargs, env)],
                                  rounds=rounds, calls=3, processes=3)
        cells = []
        for label in ("this", "other"):
            lo, hi = percentiles(figures[label].cpu)
            cells.append(f"{figures[label].cpu_median * 1e3:8.3f} ({lo * 1e3:.3f}-{hi * 1e3:.3f})")
        ratio = figures["this"].cpu_median / figures["other"].cpu_median
        print(f"{kwargs['name']:38s} {cells[0]:>24s} {cells[1]:>24s} {ratio:6.3f}", flush=True)


def model_session(name: str):
    """A run of a whole model: ``case:NAME`` from tests/data/onnx_models, or ``light:NAME`` of onnx's."""
    kind, _, short = name.partition(":")
    if kind == "case":
        path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "onnx_models" / short
        with np.load(path / "inputs.npz") as inputs:
            feeds = dict(inputs)
        g = gr.load_graph(str(path / "model.onnx"))
        model = onnx.load(str(path / "model.onnx"))
    else:
        path = pathlib.Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
        model = onnx.load(str(path / f"light_{short}.onnx"))
        g = load_onnx(model)
        feeds = {}
    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    for value in model.graph.input:
        if value.name in initializers or value.name in feeds:
            continue
        dims = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.normal(size=dims).astype(np.float32)
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in model.graph.input}}
    outputs = [o.name for o in model.graph.output]
    session = gr.Session(g)
    return lambda: session.run(outputs, feeds)


def compare(run: Callable[[], object], repeats: int, clock: Callable[[], float]) -> dict[str, list[float]]:
    """Seconds per run with the screen and without, the two taking turns at going first."""
    screen = kernels.distinct_filters
    contenders = {"screened": screen, "unscreened": lambda filters: None}
    times: dict[str, list[float]] = {label: [] for label in contenders}
    for _ in range(3):
        run()
    try:
        for i in range(repeats):
            for label in sorted(contenders, reverse=bool(i % 2)):
                kernels.distinct_filters = contenders[label]
                start = clock()
                run()
                times[label].append(clock() - start)
    finally:
        kernels.distinct_filters = screen
    return times


def screen_share(run: Callable[[], object], unscreened: list[float]) -> str:
    """The screens' CPU time in one run of a model (median of 21), and its share of the unscreened run."""
    screen = kernels.distinct_filters
    spent = [0.0]

    def timed(filters):   # the CPU time of the kernel's thread: not its waits for the GIL while others run
        start = time.thread_time()
        try:
            return screen(filters)
        finally:
            spent[0] += time.thread_time() - start

    per_run = []
    kernels.distinct_filters = timed
    try:
        for _ in range(21):
            spent[0] = 0.0
            run()
            per_run.append(spent[0])
    finally:
        kernels.distinct_filters = screen
    median = statistics.median(per_run)
    return f"{median * 1e6:9.1f} {median / statistics.median(unscreened):6.2%}"


def row(name: str, times: dict[str, list[float]], extra: str = "") -> str:
    cells = []
    for label in ("screened", "unscreened"):
        lo, hi = percentiles(times[label])
        cells.append(f"{statistics.median(times[label]) * 1e3:8.3f} ({lo * 1e3:.3f}-{hi * 1e3:.3f})")
    ratios = [a / b for a, b in zip(times["screened"], times["unscreened"])]
    lo, hi = percentiles(ratios)
    return f"{name:38s} {cells[0]:>24s} {cells[1]:>24s} {statistics.median(ratios):8.3f} ({lo:.3f}-{hi:.3f}) {extra}"


def percentiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=10)
    return q[0], q[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--models", action="store_true", help="whole models instead of single layers")
    parser.add_argument("--against", metavar="DIR", help="compare with the gradreg checkout at DIR")
    args = parser.parse_args()
    if args.against:
        against(args.against, args.batch, max(2, args.repeats // 3))
        return
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"{'':38s} {'screened ms (p10-p90)':>24s} {'unscreened ms (p10-p90)':>24s} "
          f"{'ratio (p10-p90)':>20s} {'screen us, share':>16s}")
    if args.models:
        for name in ("case:resnet_opset18", "case:mobilenetv2_opset18", "light:resnet50", "light:squeezenet"):
            run = model_session(name)
            times = compare(run, args.repeats, clock)
            print(row(name, times, screen_share(run, times["unscreened"])), flush=True)
        return
    for name, spec in LAYERS.items():
        run, filters = conv_session(*spec, batch=args.batch)
        times = compare(run, args.repeats, clock)
        extra = f"{'(groups)':>9s}"
        if filters is not None:
            screen_times = []
            for _ in range(51):
                start = time.perf_counter()
                assert kernels.distinct_filters(filters) is None
                screen_times.append(time.perf_counter() - start)
            share = statistics.median(screen_times) / statistics.median(times["unscreened"])
            extra = f"{statistics.median(screen_times) * 1e6:9.1f} {share:6.2%}"
        print(row(name, times, extra), flush=True)


if __name__ == "__main__":
    main()
