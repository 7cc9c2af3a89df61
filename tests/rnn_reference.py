"""A tanh RNN's loss and gradients by hand in NumPy, the reference for TF-style while-loop
gradients: h_0 = 0, h_t = tanh(x[t] @ w + h_{t-1} @ u), loss = sum(h_T ** 2)."""
from __future__ import annotations

import numpy as np


def tanh_rnn_gradients(x: np.ndarray, w: np.ndarray, u: np.ndarray):
    """(loss, d loss / d x, d loss / d w, d loss / d u) for x of shape (steps, batch, input)."""
    hs = [np.zeros((x.shape[1], u.shape[0]))]
    for t in range(x.shape[0]):
        hs.append(np.tanh(x[t] @ w + hs[-1] @ u))
    dh, dx, dw, du = 2 * hs[-1], np.zeros_like(x), np.zeros_like(w), np.zeros_like(u)
    for t in reversed(range(x.shape[0])):
        dz = dh * (1 - hs[t + 1] ** 2)
        dx[t] = dz @ w.T
        dw += x[t].T @ dz
        du += hs[t].T @ dz
        dh = dz @ u.T
    return np.sum(hs[-1] ** 2), dx, dw, du
