"""Gradients of LSTM, GRU and RNN: the recurrence rebuilt from onnx ops (the input projection of
all steps as one MatMul, then a Scan over time whose body applies the gates; a reverse direction
reverses each sequence within its length; steps past a batch row's length keep its state and
output zero), differentiated by :func:`through` and the Scan rule. The gates, activations and
attributes are those of :mod:`gradreg_plugins.onnx.recurrent`, which the NumPy kernel runs."""
from __future__ import annotations

import numpy as np

from gradreg.model import dtypes
from gradreg_plugins.onnx import family
from gradreg_plugins.onnx.grads.common import const_like, ints, onnx_op, per_input, through
from gradreg_plugins.onnx.recurrent import Activation, Recurrence, recurrence_of
from gradreg_plugins.onnx.subgraphs import trace_body

_INT64_MIN = np.iinfo(np.int64).min


def _activation(act: Activation, x, clip: float | None):
    if clip is not None:
        x = onnx_op("Clip", x, const_like(-clip, x), const_like(clip, x))
    a, b = act.alpha, act.beta
    simple = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "softsign": "Softsign", "softplus": "Softplus"}
    if act.name in simple:
        return onnx_op(simple[act.name], x)
    if act.name == "affine":
        return onnx_op("Add", onnx_op("Mul", x, const_like(a, x)), const_like(b, x))
    if act.name == "scaledtanh":
        return onnx_op("Mul", const_like(a, x), onnx_op("Tanh", onnx_op("Mul", x, const_like(b, x))))
    if act.name == "hardsigmoid":
        return onnx_op("HardSigmoid", x, alpha=a, beta=b)
    if act.name == "leakyrelu":
        return onnx_op("Where", onnx_op("GreaterOrEqual", x, const_like(0, x)), x, onnx_op("Mul", x, const_like(a, x)))
    if act.name == "thresholdedrelu":
        return onnx_op("ThresholdedRelu", x, alpha=a)
    return onnx_op("Where", onnx_op("GreaterOrEqual", x, const_like(0, x)), x,               # elu
                   onnx_op("Mul", const_like(a, x), onnx_op("Sub", onnx_op("Exp", x), const_like(1, x))))


def _split(x, parts: int, axis: int):
    return onnx_op("Split", x, axis=axis, num_outputs=parts, outputs=parts)


def _step(rec: Recurrence, acts, proj, states, r, rb, peep):
    """The new states of one time step, from onnx ops (mirrors recurrent.step)."""
    h = states[0]
    rt = onnx_op("Transpose", r, perm=[1, 0])
    if rec.kind == "RNN":
        return [_activation(acts[0], onnx_op("Add", onnx_op("Add", proj, onnx_op("MatMul", h, rt)), rb), rec.clip)]
    if rec.kind == "GRU":
        xz, xr, xh = _split(proj, 3, -1)
        rz, rr, rh = _split(r, 3, 0)
        bz, br, bh = _split(rb, 3, 0)

        def gate(xg, rg, bg):
            return _activation(acts[0], onnx_op("Add", onnx_op("Add", xg, onnx_op("MatMul", h, _t(rg))), bg), rec.clip)
        z, reset = gate(xz, rz, bz), gate(xr, rr, br)
        if rec.linear_before_reset:
            inner = onnx_op("Mul", reset, onnx_op("Add", onnx_op("MatMul", h, _t(rh)), bh))
        else:
            inner = onnx_op("Add", onnx_op("MatMul", onnx_op("Mul", reset, h), _t(rh)), bh)
        candidate = _activation(acts[1], onnx_op("Add", xh, inner), rec.clip)
        one = const_like(1, z)
        return [onnx_op("Add", onnx_op("Mul", onnx_op("Sub", one, z), candidate), onnx_op("Mul", z, h))]
    c = states[1]
    gates = onnx_op("Add", onnx_op("Add", proj, onnx_op("MatMul", h, rt)), rb)
    gi, go, gf, gc = _split(gates, 4, -1)
    if peep is not None:
        pi, po, pf = _split(peep, 3, 0)
        gi, gf = onnx_op("Add", gi, onnx_op("Mul", pi, c)), onnx_op("Add", gf, onnx_op("Mul", pf, c))
    i = _activation(acts[0], gi, rec.clip)
    f = onnx_op("Sub", const_like(1, i), i) if rec.input_forget else _activation(acts[0], gf, rec.clip)
    c_new = onnx_op("Add", onnx_op("Mul", f, c), onnx_op("Mul", i, _activation(acts[1], gc, rec.clip)))
    if peep is not None:
        go = onnx_op("Add", go, onnx_op("Mul", po, c_new))
    o = _activation(acts[0], go, rec.clip)
    return [onnx_op("Mul", o, _activation(acts[2], c_new, None)), c_new]


def _t(m):
    return onnx_op("Transpose", m, perm=[1, 0])


def _reverse(x, lengths):
    """Each batch row's sequence reversed within its length (time axis 0, batch axis 1)."""
    if lengths is None:
        return onnx_op("Slice", x, ints([-1], x, "start"), ints([_INT64_MIN], x, "end"), ints([0], x, "axis"),
                       ints([-1], x, "step"))
    return onnx_op("ReverseSequence", x, lengths, batch_axis=1, time_axis=0)


def _direction(op, rec: Recurrence, d: int, x, w, r, b, lengths, states, peep):
    """(Y of the direction (time, batch, hidden), its final states)."""
    take = ints([d], x, "direction")
    squeeze = ints([0], x, "axis0")

    def pick(t):
        return onnx_op("Squeeze", onnx_op("Gather", t, take, axis=0), squeeze) if t is not None else None
    w_d, r_d, peep_d = pick(w), pick(r), pick(peep)
    reverse = rec.directions[d] == "reverse"
    xs = _reverse(x, lengths) if reverse else x
    proj = onnx_op("MatMul", xs, _t(w_d))
    if b is not None:
        wb, rb = _split(pick(b), 2, 0)
        proj = onnx_op("Add", proj, wb)
    else:   # no bias: zeros of the gates' width
        rb = onnx_op("ConstantOfShape", onnx_op("Shape", r_d, start=0, end=1),
                     value=np.zeros(1, x.known_dtype.base_dtype.storage))
    acts = rec.activations[d]
    n_states = len(states)
    steps = onnx_op("Range", np.int64(0), onnx_op("Squeeze", onnx_op("Shape", x, start=0, end=1), squeeze),
                    np.int64(1))

    def body(*args):
        current, proj_t, t = list(args[:n_states]), args[n_states], args[n_states + 1]
        new = _step(rec, acts, proj_t, current, r_d, rb, peep_d)
        if lengths is None:
            return new + [onnx_op("Identity", new[0])]
        valid = onnx_op("Unsqueeze", onnx_op("Less", t, lengths), ints([1], x, "axis1"))
        kept = [onnx_op("Where", valid, n, s) for n, s in zip(new, current)]
        return kept + [onnx_op("Where", valid, new[0], const_like(0, new[0]))]
    dtype = x.known_dtype.base_dtype
    element = None if proj.shape.dims is None else list(proj.shape.dims[1:])
    specs = [(dtype, s.shape) for s in states] + [(dtype, element), (dtypes.int64, [])]
    name, captured = trace_body(op.graph, f"{op.name.split('/')[-1]}_{rec.directions[d]}_step", specs, body)
    result = onnx_op("Scan", *states, proj, steps, body=name, num_scan_inputs=2, captured=captured,
                     output_types=[dtype] * (n_states + 1), outputs=n_states + 1)
    finals, y = list(result[:n_states]), result[n_states]
    return (_reverse(y, lengths) if reverse else y), finals


def _rebuilt(op, rec: Recurrence, x, w, r, b=None, lengths=None, h0=None, c0=None, peep=None):
    """The node's outputs (Y, Y_h[, Y_c]) from onnx ops."""
    if rec.layout:
        x = onnx_op("Transpose", x, perm=[1, 0, 2])
        h0 = onnx_op("Transpose", h0, perm=[1, 0, 2]) if h0 is not None else None
        c0 = onnx_op("Transpose", c0, perm=[1, 0, 2]) if c0 is not None else None
    if lengths is not None:
        lengths = onnx_op("Cast", lengths, to=dtypes.int64)
    ys, finals = [], []
    for d in range(len(rec.directions)):
        states = []
        for s0 in ([h0, c0] if rec.kind == "LSTM" else [h0]):
            if s0 is None:
                batch = onnx_op("Shape", x, start=1, end=2)
                hidden = onnx_op("Shape", r, start=2, end=3)
                s0 = onnx_op("ConstantOfShape", onnx_op("Concat", batch, hidden, axis=0),
                             value=np.zeros(1, x.known_dtype.base_dtype.storage))
            else:
                s0 = onnx_op("Squeeze", onnx_op("Gather", s0, ints([d], x, "direction"), axis=0), ints([0], x, "a"))
            states.append(s0)
        y, last = _direction(op, rec, d, x, w, r, b, lengths, states, peep)
        ys.append(onnx_op("Unsqueeze", y, ints([1], x, "axis1")))
        finals.append([onnx_op("Unsqueeze", s, ints([0], x, "axis0")) for s in last])
    y = ys[0] if len(ys) == 1 else onnx_op("Concat", *ys, axis=1)
    outs = [y] + [f[0] if len(f) == 1 else onnx_op("Concat", *f, axis=0) for f in zip(*finals)]
    if rec.layout:
        outs = [onnx_op("Transpose", outs[0], perm=[2, 0, 1, 3])] + \
               [onnx_op("Transpose", s, perm=[1, 0, 2]) for s in outs[1:]]
    return outs


def _recurrent_grad(op, *grads):
    rec = recurrence_of(op)
    return per_input(op, through(op, grads, lambda *inputs: _rebuilt(op, rec, *inputs)))


for _op_type in ("onnx::LSTM", "onnx::GRU", "onnx::RNN"):
    family.gradient(_op_type)(_recurrent_grad)
