"""LSTM, GRU and RNN: one description of their gates shared by the NumPy kernels (here) and the
gradient rules (gradreg_plugins.onnx.grads.recurrent, which rebuild the same recurrence from onnx
ops in a Scan and differentiate that).

Every attribute of the ONNX operators is honoured (onnx.reference ignores most of them):
directions, ``layout``, ``sequence_lens`` (steps past a batch row's length leave its state and
output zero, a reverse pass starts at its last valid step), ``activations`` with
``activation_alpha`` / ``activation_beta`` (consumed in order by the functions that take them,
defaults as the ONNX operators of those names), ``clip`` (applied to the gates' inputs, not to
LSTM's h(C), as onnxruntime does),
LSTM's peepholes and ``input_forget``, GRU's ``linear_before_reset``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradreg.errors import ExecutionError, describe_node
from gradreg_plugins.onnx.nodes import input_layout, output_layout

# name -> (NumPy function of (x, alpha, beta), takes alpha, takes beta, default alpha, default beta)
ACTIVATIONS: dict[str, tuple[Callable[..., Any], bool, bool, float, float]] = {
    "sigmoid": (lambda x, a, b: 1 / (1 + np.exp(-x)), False, False, 0.0, 0.0),
    "tanh": (lambda x, a, b: np.tanh(x), False, False, 0.0, 0.0),
    "relu": (lambda x, a, b: np.maximum(x, 0), False, False, 0.0, 0.0),
    "affine": (lambda x, a, b: a * x + b, True, True, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), True, False, 0.01, 0.0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), True, False, 1.0, 0.0),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), True, True, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), True, True, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)), True, False, 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), False, False, 0.0, 0.0),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), False, False, 0.0, 0.0),
}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


@dataclass(frozen=True)
class Activation:
    name: str
    alpha: float
    beta: float


@dataclass(frozen=True)
class Recurrence:
    """What one LSTM/GRU/RNN node computes, read off its attributes."""
    kind: str                       # "LSTM", "GRU" or "RNN"
    directions: tuple[str, ...]     # ("forward",), ("reverse",) or ("forward", "reverse")
    activations: tuple[tuple[Activation, ...], ...]   # per direction: f, g, h (as many as the kind uses)
    clip: float | None
    layout: int
    input_forget: bool
    linear_before_reset: bool

    @property
    def per_direction(self) -> int:
        return len(DEFAULT_ACTIVATIONS[self.kind])


def recurrence_of(op) -> Recurrence:
    """The node's Recurrence; ExecutionError naming it for an unknown direction or activation."""
    kind = op.type.rpartition("::")[2]
    direction = (op.get_attr("direction") or b"forward").decode()
    directions = {"forward": ("forward",), "reverse": ("reverse",), "bidirectional": ("forward", "reverse")}
    if direction not in directions:
        raise _error(op, f"unknown direction '{direction}'")
    dirs = directions[direction]
    names = [n.decode() if isinstance(n, bytes) else n for n in (op.get_attr("activations") or [])]
    per = len(DEFAULT_ACTIVATIONS[kind])
    if not names:
        names = list(DEFAULT_ACTIVATIONS[kind]) * len(dirs)
    elif len(names) == per and len(dirs) == 2:
        names = names * 2        # one list for both directions
    elif len(names) > per * len(dirs):
        names = names[:per * len(dirs)]   # RNN's schema default lists Tanh twice, for either direction count
    if len(names) != per * len(dirs):
        raise _error(op, f"{len(names)} activations for {len(dirs)} direction(s) of {per} functions")
    alphas = list(op.get_attr("activation_alpha") or [])
    betas = list(op.get_attr("activation_beta") or [])
    made = []
    for name in names:
        entry = ACTIVATIONS.get(name.lower())
        if entry is None:
            raise _error(op, f"unknown activation function '{name}'")
        _, takes_alpha, takes_beta, alpha, beta = entry
        if takes_alpha and alphas:
            alpha = float(alphas.pop(0))
        if takes_beta and betas:
            beta = float(betas.pop(0))
        made.append(Activation(name.lower(), alpha, beta))
    clip = op.get_attr("clip")
    return Recurrence(kind, dirs, tuple(tuple(made[i * per:(i + 1) * per]) for i in range(len(dirs))),
                      float(clip) if clip is not None else None, int(op.get_attr("layout") or 0),
                      bool(op.get_attr("input_forget")) if kind == "LSTM" else False,
                      bool(op.get_attr("linear_before_reset")) if kind == "GRU" else False)


def _error(op, message: str) -> ExecutionError:
    return ExecutionError(f"{describe_node(op.name, op.type)}: {message}", op.name, op.type)


# -- the NumPy kernel ----------------------------------------------------------------------------------

def _apply(act: Activation, x: np.ndarray, clip: float | None) -> np.ndarray:
    if clip is not None:
        x = np.clip(x, -clip, clip)
    return ACTIVATIONS[act.name][0](x, act.alpha, act.beta)


def step(rec: Recurrence, acts: Sequence[Activation], x_proj: np.ndarray, states: list[np.ndarray],
         r: np.ndarray, rb: np.ndarray, peep: np.ndarray | None) -> list[np.ndarray]:
    """One time step: x_proj = x W^T + Wb (all gates, batch x gates*H); returns the new states
    (H, and C for an LSTM)."""
    h = states[0]
    hidden = h.shape[-1]
    if rec.kind == "RNN":
        return [_apply(acts[0], x_proj + h @ r.T + rb, rec.clip)]
    if rec.kind == "GRU":
        xz, xr, xh = np.split(x_proj, 3, axis=-1)
        rz, rr, rh = np.split(r, 3, axis=0)
        bz, br, bh = np.split(rb, 3)
        z = _apply(acts[0], xz + h @ rz.T + bz, rec.clip)
        reset = _apply(acts[0], xr + h @ rr.T + br, rec.clip)
        if rec.linear_before_reset:
            candidate = _apply(acts[1], xh + reset * (h @ rh.T + bh), rec.clip)
        else:
            candidate = _apply(acts[1], xh + (reset * h) @ rh.T + bh, rec.clip)
        return [(1 - z) * candidate + z * h]
    c = states[1]
    gates = x_proj + h @ r.T + rb
    gi, go, gf, gc = np.split(gates, 4, axis=-1)
    pi, po, pf = (np.zeros(hidden, x_proj.dtype),) * 3 if peep is None else np.split(peep, 3)
    i = _apply(acts[0], gi + pi * c, rec.clip)
    f = 1 - i if rec.input_forget else _apply(acts[0], gf + pf * c, rec.clip)
    c_new = f * c + i * _apply(acts[1], gc, rec.clip)
    o = _apply(acts[0], go + po * c_new, rec.clip)
    return [o * _apply(acts[2], c_new, None), c_new]     # h(C) unclipped, as onnxruntime


def reverse_sequence(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """x (time, batch, ...) with each batch row's first ``lengths[b]`` steps reversed."""
    out = np.array(x, copy=True)
    for b, n in enumerate(lengths):
        out[:n, b] = x[:n, b][::-1]
    return out


def run_direction(rec: Recurrence, acts, x, w, r, wb, rb, peep, states, lengths, reverse: bool):
    """Y (time, batch, hidden) and the final states of one direction."""
    steps = x.shape[0]
    xs = reverse_sequence(x, lengths) if reverse else x
    proj = xs @ w.T + wb
    ys = np.zeros((steps,) + states[0].shape, dtype=x.dtype)
    for t in range(steps):
        new = step(rec, acts, proj[t], states, r, rb, peep)
        valid = (t < lengths)[:, None]
        states = [np.where(valid, n, s) for n, s in zip(new, states)]
        ys[t] = np.where(valid, new[0], 0)
    return (reverse_sequence(ys, lengths) if reverse else ys), states


def kernel_factory(op, ctx):
    """The NumPy kernel of an LSTM, GRU or RNN node."""
    rec = recurrence_of(op)
    layout = input_layout(op)
    n_states = 2 if rec.kind == "LSTM" else 1
    n_out = len(op.outputs)
    out_layout = [i for i in _output_positions(op)]

    def compute(*args):
        def arg(position):
            index = layout[position] if position < len(layout) else None
            return None if index is None else args[index]
        x, w, r, b, lengths = arg(0), arg(1), arg(2), arg(3), arg(4)
        if rec.layout:
            x = np.swapaxes(x, 0, 1)
        steps, batch = x.shape[:2]
        hidden = r.shape[-1]
        gates = GATES[rec.kind] * hidden
        lengths = np.full(batch, steps, np.int64) if lengths is None else np.asarray(lengths).astype(np.int64)
        initial = [arg(5), arg(6) if rec.kind == "LSTM" else None]
        peeps = arg(7) if rec.kind == "LSTM" else None
        ys, finals = [], [[] for _ in range(n_states)]
        for d, direction in enumerate(rec.directions):
            states = [_initial_state(rec, initial[k], d, (batch, hidden), x.dtype) for k in range(n_states)]
            bias = np.zeros(2 * gates, x.dtype) if b is None else b[d]
            y, last = run_direction(rec, rec.activations[d], x, w[d], r[d], bias[:gates], bias[gates:],
                                    None if peeps is None else peeps[d], states, lengths, direction == "reverse")
            ys.append(y)
            for k in range(n_states):
                finals[k].append(last[k])
        y = np.stack(ys, axis=1)                                            # (time, dirs, batch, hidden)
        results = [y] + [np.stack(f, axis=0) for f in finals]               # (dirs, batch, hidden)
        if rec.layout:
            results = [np.transpose(y, (2, 0, 1, 3))] + [np.swapaxes(f, 0, 1) for f in results[1:]]
        outs = [results[p].astype(x.dtype, copy=False) for p in out_layout]
        return outs[0] if n_out == 1 else tuple(outs)
    return compute


def _initial_state(rec: Recurrence, given: np.ndarray | None, direction: int, shape: tuple[int, int],
                   dtype: Any) -> np.ndarray:
    if given is None:
        return np.zeros(shape, dtype)
    return (np.swapaxes(given, 0, 1) if rec.layout else given)[direction]


def _output_positions(op) -> list[int]:
    return [p for p, i in enumerate(output_layout(op)) if i is not None]
