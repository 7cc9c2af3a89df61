"""Where a gradreg step's time goes: every kernel its plan calls, timed, grouped by op type.

    python bench/kernel_account.py [--workload mobilenet_v2_224] [--steps 5] [--top 25] [--by-node]

Workloads: the three small CNNs (``mobilenet_v2_64``, ``densenet_slim_32``,
``resnet_slim_f64_32``), the realistic ones (``mobilenet_v2_224``, ``resnet50_224``: written on
first use by bench/realistic.py, TensorFlow and keras needed then), ``mlp``, ``rnn`` and
``elementwise``. The step is made and warmed as bench/protocol.py makes it (compiled kernels
in, the plan's trial of its call modes settled); then each kernel the plan's code calls is
wrapped in a timer (about a microsecond a call more: a small kernel's share reads high), and
``--steps`` steps are timed. Printed: the step with and without the timers, the kernels' sum,
and per op type (a fused loop as "fused loop", a loop's body with its loop) milliseconds a
step, calls a step and the share of the step. The kernels of a loop's body run inside its
loop's kernel when the loop is a functional While (counted there); a v1 loop's are the plan's own.

Kernels of the same op type are one line: e.g. all of a model's Conv2DBackpropFilter, whatever
their shapes; with ``--by-node`` each shape of convolution is a line of its own (input * filter
/ stride), with the rate its static shapes give (GFLOP/s: twice its multiply-adds over its time).
What the timers change: a timed kernel cannot take over an input's buffer (the timer holds a
reference to it), so fused loops that would write into one allocate instead and read high
(MobileNetV2-224: the step 755 ms bare, 872 ms timed); kernels run as side tasks on another
thread overlap the rest, so the kernels' sum can exceed the step. Read the shares, not the sum,
and compare the step with and without the timers. It measures one process, as the machine is
(load printed): compare two figures from it only when taken the same minute.
"""
from __future__ import annotations

import argparse
import collections
import gc
import math
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SMALL_CNNS = ("mobilenet_v2_64", "densenet_slim_32", "resnet_slim_f64_32")
REALISTIC = ("mobilenet_v2_224", "resnet50_224")
OTHERS = {"mlp": "foreign_mlp", "rnn": "foreign_rnn", "elementwise": "foreign_elementwise"}


def make_step(workload: str):
    """The workload's gradreg step, warmed and settled (as bench/protocol.py times it)."""
    if workload in SMALL_CNNS:
        import foreign_cnn
        return foreign_cnn.gradreg_step(workload)[0]
    if workload in REALISTIC:
        import realistic
        return realistic.gradreg_step(workload)[0]
    if workload in OTHERS:
        import importlib
        made = importlib.import_module(OTHERS[workload]).gradreg_step()
        return made[0] if isinstance(made, tuple) else made
    raise SystemExit(f"unknown workload {workload!r}: one of "
                     f"{', '.join((*SMALL_CNNS, *REALISTIC, *OTHERS))}")


class _Timer:
    __slots__ = ("kernel", "label", "seconds", "calls")

    def __init__(self, kernel, label: str, seconds: dict, calls: collections.Counter):
        self.kernel, self.label, self.seconds, self.calls = kernel, label, seconds, calls

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.kernel(*args, **kwargs)
        finally:
            self.seconds[self.label] += time.perf_counter() - start
            self.calls[self.label] += 1


_CONVOLUTIONS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2dNative",
                 "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter")


def conv_flops(op) -> float | None:
    """Multiply-adds times two of a convolution node, from its static shapes: the output (or
    output gradient) times the filter's window and input depth; None when a shape is unknown."""
    if op.type not in _CONVOLUTIONS:
        return None
    forward = op.type in ("Conv2D", "DepthwiseConv2dNative")
    out = op.outputs[0] if forward else op.inputs[2]
    filt = _filter(op)
    if not out.shape.is_fully_defined() or not filt.shape.is_fully_defined():
        return None
    kh, kw, depth, _ = filt.shape.as_list()
    if op.type.startswith("Depthwise"):
        depth = 1
    return 2.0 * math.prod(out.shape.as_list()) * kh * kw * depth


def _filter(op):
    """A convolution node's filter, or for a filter backprop its output (the filter's shape)."""
    from gradreg_plugins.nn.conv import filter_tensor
    return filter_tensor(op, "filter" if op.type.endswith("BackpropFilter") else "forward")


def _node_label(op, by_node: bool) -> str:
    if not by_node or op.type not in _CONVOLUTIONS:
        return op.type
    filt = _filter(op)
    data = op.outputs[0] if op.type.endswith("BackpropInput") else op.inputs[0]
    strides = op.get_attr("strides")
    return (f"{op.type} {'x'.join(map(str, data.shape.as_list()))} * {'x'.join(map(str, filt.shape.as_list()))}"
            f" /{strides[1]}")


def _labels(plan, by_node: bool = False) -> dict[str, tuple[str, float | None]]:
    """Each kernel name of the plan's code (k<N>) -> (the op type of the line that calls it, or
    with ``by_node`` a convolution's shapes; the convolution's flops or None)."""
    labels: dict[str, tuple[str, float | None]] = {}
    for number, line in enumerate(plan.source.splitlines(), 1):
        op = plan._compiled.line_ops.get(number)
        for name in re.findall(r"\b(k\d+)\b", line):      # called, or handed to the side runner
            if name in labels:
                continue
            if type(op).__name__ == "FusedGroup":
                labels[name] = ("fused loop", None)
            elif getattr(op, "type", None):
                labels[name] = (_node_label(op, by_node), conv_flops(op))
            else:
                labels[name] = ("(no node)", None)
    return labels


def account(step, steps: int, by_node: bool = False
            ) -> tuple[float, float, dict[str, float], collections.Counter, dict[str, float]]:
    """(seconds a step without timers, with them, seconds per label, calls per label, flops per
    label and step: the convolutions')."""
    from gradreg.runtime.plan import Plan
    plans = [o for o in gc.get_objects() if isinstance(o, Plan) and o.num_ops]
    if not plans:
        raise SystemExit("no plan found: the step made none")
    start = time.perf_counter()
    for _ in range(steps):
        step()
    plain = (time.perf_counter() - start) / steps
    seconds: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()
    flops: dict[str, float] = collections.defaultdict(float)
    for plan in plans:
        bound = plan._fn.__globals__
        for name, (label, node_flops) in _labels(plan, by_node).items():
            if callable(bound.get(name)) and not isinstance(bound[name], _Timer):
                bound[name] = _Timer(bound[name], label, seconds, calls)
                if node_flops:
                    flops[label] += node_flops
    step()
    seconds.clear()
    calls.clear()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    timed = (time.perf_counter() - start) / steps
    for plan in plans:     # the kernels as they were
        bound = plan._fn.__globals__
        for name in list(bound):
            if isinstance(bound[name], _Timer):
                bound[name] = bound[name].kernel
    return plain, timed, {k: v / steps for k, v in seconds.items()}, calls, flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mobilenet_v2_224")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--by-node", action="store_true",
                        help="a line for each shape of convolution (input * filter / stride), not each op type")
    args = parser.parse_args()
    step = make_step(args.workload)
    plain, timed, seconds, calls, flops = account(step, args.steps, args.by_node)
    one, five, _ = os.getloadavg()
    print(f"{args.workload}: a step {plain * 1e3:.1f} ms ({timed * 1e3:.1f} ms with the timers), the kernels "
          f"{sum(seconds.values()) * 1e3:.1f} ms; {args.steps} steps; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; load {one:.2f} (1 min) {five:.2f} (5 min)")
    for label, spent in sorted(seconds.items(), key=lambda item: -item[1])[:args.top]:
        rate = f"{flops[label] / spent / 1e9:6.1f} GFLOP/s" if flops.get(label) else " " * 14
        print(f"  {spent * 1e3:9.2f} ms  {calls[label] / args.steps:7.1f} calls  {spent / timed:6.1%}  {rate}  {label}")


if __name__ == "__main__":
    main()
