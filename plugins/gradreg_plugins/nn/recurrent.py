"""Fused LSTMs: BlockLSTM and BlockLSTMV2 (TensorFlow 1's LSTMBlockFusedCell runs a whole
sequence in one op) and their gradient ops BlockLSTMGrad / BlockLSTMGradV2 — definitions, shape
functions, NumPy kernels and the rule.

Per time step t < seq_len_max, with xh = [x[t], h[t-1]] and gates = xh w + b split in four
blocks of cell_size columns (BlockLSTM: i, c, f, o; V2: i, f, c, o)::

    i = sigmoid(gate_i + wci cs[t-1])        (the w* terms only with use_peephole)
    ci = tanh(gate_c)
    f = sigmoid(gate_f + forget_bias + wcf cs[t-1])     (V2 has no forget_bias)
    cs = clip(i ci + f cs[t-1], -cell_clip, cell_clip)  (when cell_clip > 0)
    co = tanh(cs); o = sigmoid(gate_o + wco cs); h = o co

The outputs are [time, batch, cell_size] each; past seq_len_max cs and h are zero (TensorFlow
leaves i, f, o, ci and co there uninitialized: gradreg gives zeros).

The rule, as TensorFlow's: BlockLSTMGrad from the gradients of cs and h (those of i, f, o, ci
and co are ignored), run backwards in time — except that BlockLSTMV2's is BlockLSTMGradV2, where
TensorFlow's rule uses BlockLSTMGrad for both ops, so that its gradients of a BlockLSTMV2 have
the c and f gates' parts swapped (tests/test_op_sweep.py checks gradreg's against finite
differences). The gradient ops' kernels are TensorFlow's: the gradient flows through the cell
clip as if it were not there, and nothing flows from steps past seq_len_max.
Float16 is computed in float32 and rounded at the outputs.
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op
from gradreg.model.shapes import TensorShape
from gradreg_plugins.nn import family
from gradreg_plugins.nn.kernels import kernel

op = family.op

_INPUTS = ["seq_len_max: int64", "x: T", "cs_prev: T", "h_prev: T", "w: T", "wci: T", "wcf: T", "wco: T", "b: T"]
_STATES = ["i", "cs", "f", "o", "ci", "co", "h"]
_T = "T: {float16, float32}"


def _block_lstm_shape(ctx):
    x = ctx.input_shape(1).with_rank(3)
    cell = ctx.input_shape(8).with_rank(1).dims[0]
    cell = cell // 4 if cell is not None else ctx.input_shape(2).with_rank(2).dims[1]
    return [TensorShape([x.dims[0], x.dims[1], cell])] * len(_STATES)


op("BlockLSTM", inputs=_INPUTS, outputs=[f"{s}: T" for s in _STATES],
   attrs=["forget_bias: float = 1.0", "cell_clip: float = 3.0", "use_peephole: bool = false", _T],
   shape=_block_lstm_shape)
op("BlockLSTMV2", inputs=_INPUTS, outputs=[f"{s}: T" for s in _STATES],
   attrs=["cell_clip: float = 0.0", "use_peephole: bool = false", _T], shape=_block_lstm_shape)
for _name in ("BlockLSTMGrad", "BlockLSTMGradV2"):
    op(_name, inputs=_INPUTS + [f"{s}: T" for s in _STATES] + ["cs_grad: T", "h_grad: T"],
       outputs=[f"{n}_grad: T" for n in ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")],
       attrs=["use_peephole: bool", _T], shape=lambda ctx: [ctx.input_shape(i) for i in range(1, 9)])


# -- kernels ---------------------------------------------------------------------------------------

def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


class _Layout:
    """Column blocks of the gates: BlockLSTM's i, c, f, o, or V2's i, f, c, o."""

    def __init__(self, v2: bool, cell: int):
        c, f = (2, 1) if v2 else (1, 2)
        self.i, self.c, self.f, self.o = (slice(k * cell, (k + 1) * cell) for k in (0, c, f, 3))


def _check(x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_len_max) -> int:
    if x.ndim != 3:
        raise ValueError("x must be 3D")
    time, batch, width = x.shape
    cell = cs_prev.shape[-1] if cs_prev.ndim == 2 else -1
    expected = {"cs_prev": (cs_prev.shape, (batch, cell)), "h_prev": (h_prev.shape, (batch, cell)),
                "w": (w.shape, (width + cell, 4 * cell)), "wci": (wci.shape, (cell,)), "wcf": (wcf.shape, (cell,)),
                "wco": (wco.shape, (cell,)), "b": (b.shape, (4 * cell,))}
    for name, (have, want) in expected.items():
        if have != want:
            raise ValueError(f"{name} must have shape {list(want)}, got {list(have)}")
    steps = int(seq_len_max)
    if np.ndim(seq_len_max) != 0 or not 0 <= steps <= time:
        raise ValueError(f"seq_len_max must be between 0 and {time} but is {steps}")
    return steps


def _block_lstm(op, ctx):
    v2 = op.type == "BlockLSTMV2"
    forget_bias = 0.0 if v2 else op.get_attr("forget_bias")
    cell_clip, peephole = op.get_attr("cell_clip"), op.get_attr("use_peephole")

    def compute(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b):
        storage = x.dtype
        x, cs_prev, h_prev, w, wci, wcf, wco, b = (np.asarray(a, np.float32)
                                                  for a in (x, cs_prev, h_prev, w, wci, wcf, wco, b))
        steps = _check(x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_len_max)
        out = {s: np.zeros(x.shape[:2] + cs_prev.shape[1:], np.float32) for s in _STATES}
        gate = _Layout(v2, cs_prev.shape[1])
        cs, h = cs_prev, h_prev
        for t in range(steps):
            gates = np.concatenate([x[t], h], axis=1) @ w + b
            i = _sigmoid(gates[:, gate.i] + cs * wci if peephole else gates[:, gate.i])
            ci = np.tanh(gates[:, gate.c])
            f = _sigmoid(gates[:, gate.f] + np.float32(forget_bias) + (cs * wcf if peephole else 0))
            cs = i * ci + f * cs
            if cell_clip > 0:
                cs = np.clip(cs, -np.float32(cell_clip), np.float32(cell_clip))
            co = np.tanh(cs)
            o = _sigmoid(gates[:, gate.o] + cs * wco if peephole else gates[:, gate.o])
            h = o * co
            for name, value in zip(_STATES, (i, cs, f, o, ci, co, h)):
                out[name][t] = value
        return tuple(out[s].astype(storage, copy=False) for s in _STATES)
    return compute


kernel("BlockLSTM")(_block_lstm)
kernel("BlockLSTMV2")(_block_lstm)


def _step_grad(state: dict, t: int, cs_prev, dcs_in, dh, peephole: bool, wci, wcf, wco):
    """TensorFlow's BlockLSTMBprop at step t: (d gates, d cs[t-1] through the cell)."""
    i, cs, f, o, ci, co = (state[s][t] for s in ("i", "cs", "f", "o", "ci", "co"))
    do = o * (1 - o) * dh * co
    dcs = (1 - co * co) * dh * o + dcs_in
    if peephole:
        dcs = dcs + do * wco
    dci = (1 - ci * ci) * dcs * i
    df = f * (1 - f) * dcs * cs_prev
    di = i * (1 - i) * dcs * ci
    dcs_prev = dcs * f
    if peephole:
        dcs_prev = dcs_prev + di * wci + df * wcf
    return (di, dci, df, do), dcs_prev


def _block_lstm_grad(op, ctx):
    v2 = op.type == "BlockLSTMGradV2"
    peephole = op.get_attr("use_peephole")

    def compute(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *rest):
        storage = x.dtype
        x, cs_prev, h_prev, w, wci, wcf, wco, b = (np.asarray(a, np.float32)
                                                  for a in (x, cs_prev, h_prev, w, wci, wcf, wco, b))
        steps = _check(x, cs_prev, h_prev, w, wci, wcf, wco, b, seq_len_max)
        state = dict(zip(_STATES, (np.asarray(a, np.float32) for a in rest[:7])))
        cs_grad, h_grad = (np.asarray(a, np.float32) for a in rest[7:])
        cell, width = cs_prev.shape[1], x.shape[2]
        gate = _Layout(v2, cell)
        grads = {n: np.zeros_like(a) for n, a in (("x", x), ("w", w), ("wci", wci), ("wcf", wcf), ("wco", wco),
                                                  ("b", b))}
        dcs_next, dh_next = np.zeros_like(cs_prev), np.zeros_like(h_prev)
        for t in range(steps - 1, -1, -1):
            cs_before = cs_prev if t == 0 else state["cs"][t - 1]
            h_before = h_prev if t == 0 else state["h"][t - 1]
            (di, dci, df, do), dcs_next = _step_grad(state, t, cs_before, dcs_next + cs_grad[t],
                                                     dh_next + h_grad[t], peephole, wci, wcf, wco)
            dgates = np.empty((x.shape[1], 4 * cell), np.float32)
            for block, value in ((gate.i, di), (gate.c, dci), (gate.f, df), (gate.o, do)):
                dgates[:, block] = value
            dxh = dgates @ w.T
            grads["x"][t], dh_next = dxh[:, :width], dxh[:, width:]
            grads["w"] += np.concatenate([x[t], h_before], axis=1).T @ dgates
            grads["b"] += dgates.sum(axis=0)
            if peephole:
                grads["wci"] += (di * cs_before).sum(axis=0)
                grads["wcf"] += (df * cs_before).sum(axis=0)
                grads["wco"] += (do * state["cs"][t]).sum(axis=0)
        values = (grads["x"], dcs_next, dh_next, grads["w"], grads["wci"], grads["wcf"], grads["wco"], grads["b"])
        return tuple(v.astype(storage, copy=False) for v in values)
    return compute


kernel("BlockLSTMGrad")(_block_lstm_grad)
kernel("BlockLSTMGradV2")(_block_lstm_grad)


# -- the rule --------------------------------------------------------------------------------------

def _block_lstm_rule(op, *grads):
    """BlockLSTMGrad(V2) of the inputs, the outputs and the gradients of cs and h."""
    grad_op = "BlockLSTMGradV2" if op.type == "BlockLSTMV2" else "BlockLSTMGrad"
    dcs, dh = rules.dense(grads[1]), rules.dense(grads[6])
    input_grads = apply_op(grad_op, *op.inputs, *op.outputs, dcs, dh, use_peephole=op.get_attr("use_peephole"))
    return [None, *input_grads]


family.gradient("BlockLSTM", "BlockLSTMV2")(_block_lstm_rule)
# As in TensorFlow, which registers no rule for them: the gradient ops are not differentiated again.
family.not_differentiable("BlockLSTMGrad", "BlockLSTMGradV2")
