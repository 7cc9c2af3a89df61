"""The NumPy kernels' faster forms give the values of the plain ones: depthwise convolutions over
every position's window (many channels) or over rows of width * channels (few channels, stride
1), their gradients by the adjoint identities; Relu and Relu6 by np.clip where NumPy has the
loop; a fused group's Sum over its leading axes by a product with ones."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends.numba.kernels import SumAfter, _leading_sum


def _reference_depthwise(x, f, stride, dilation, pads):
    """Depthwise NHWC x (kh, kw, c, m), tap by tap in explicit index arithmetic."""
    (top, bottom), (left, right) = pads
    n, h, w, c = x.shape
    kh, kw, _, m = f.shape
    xp = np.zeros((n, h + top + bottom, w + left + right, c), x.dtype)
    xp[:, top:top + h, left:left + w] = x
    oh = (xp.shape[1] - (kh - 1) * dilation - 1) // stride + 1
    ow = (xp.shape[2] - (kw - 1) * dilation - 1) // stride + 1
    out = np.zeros((n, oh, ow, c, m), np.float64)
    for i, j in itertools.product(range(kh), range(kw)):
        tap = xp[:, i * dilation:i * dilation + (oh - 1) * stride + 1:stride,
                 j * dilation:j * dilation + (ow - 1) * stride + 1:stride]
        out += tap[..., None].astype(np.float64) * f[i, j].astype(np.float64)
    return out.reshape(n, oh, ow, c * m)


GEOMETRIES = [  # channels, multiplier, window, stride, dilation, padding (explicit pads or a name)
    (16, 1, (3, 3), 1, 1, "SAME"),          # few channels, stride 1: rows of width * channels
    (3, 1, (2, 4), 1, 2, "SAME"),
    (16, 1, (3, 3), 2, 1, "SAME"),          # few channels, stride 2: tap by tap
    (64, 1, (3, 3), 1, 1, "SAME"),          # many channels: one einsum over the windows
    (70, 1, (3, 2), 2, 1, "VALID"),
    (64, 1, (3, 3), 1, 2, ((1, 3), (0, 2))),
    (64, 1, (2, 2), 1, 1, ((3, 0), (0, 0))),   # a pad beyond the window's reach: tap by tap
    (16, 2, (3, 3), 1, 1, "SAME"),          # multiplier 2: tap by tap
]


@pytest.mark.parametrize("channels, m, window, stride, dilation, padding", GEOMETRIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_forms_give_the_tap_by_tap_values(channels, m, window, stride, dilation, padding, dtype):
    rng = np.random.default_rng(channels + m + stride)
    kh, kw = window
    xv = rng.standard_normal((2, 9, 7, channels)).astype(dtype)
    fv = rng.standard_normal((kh, kw, channels, m)).astype(dtype)
    opts = {"strides": [1, stride, stride, 1], "dilations": [1, dilation, dilation, 1]}
    if isinstance(padding, str):
        opts["padding"] = padding
        pads = _same_pads(xv.shape[1:3], window, stride, dilation) if padding == "SAME" else ((0, 0), (0, 0))
    else:
        opts["padding"] = "EXPLICIT"
        opts["explicit_paddings"] = [0, 0, *padding[0], *padding[1], 0, 0]
        pads = padding
    expected = _reference_depthwise(xv, fv, stride, dilation, pads)
    dyv = rng.standard_normal(expected.shape).astype(dtype)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.constant(xv)
        f = gr.constant(fv)
        dy = gr.constant(dyv)
        y = gr.apply_op("DepthwiseConv2dNative", x, f, **opts)
        dx = gr.apply_op("DepthwiseConv2dNativeBackpropInput", gr.constant(np.array(xv.shape, np.int32)), f, dy,
                         **opts)
        df = gr.apply_op("DepthwiseConv2dNativeBackpropFilter", x, gr.constant(np.array(fv.shape, np.int32)), dy,
                         **opts)
    yv, dxv, dfv = gr.Session(graph, backend="numpy").run([y, dx, df])
    assert yv.dtype == dxv.dtype == dfv.dtype == dtype
    assert dxv.shape == xv.shape and dfv.shape == fv.shape
    tolerance = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(yv, expected, rtol=tolerance, atol=tolerance)
    inner = float(np.sum(dyv.astype(np.float64) * expected))
    for grad, value in ((dxv, xv), (dfv, fv)):
        assert abs(float(np.sum(grad.astype(np.float64) * value)) - inner) < tolerance * max(1.0, abs(inner)) * 10


def _same_pads(hw, window, stride, dilation):
    pads = []
    for size, k in zip(hw, window):
        out = -(-size // stride)
        total = max(0, (out - 1) * stride + (k - 1) * dilation + 1 - size)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_relu_and_relu6_keep_their_values(dtype):
    values = np.array([-7, -1, -0.0, 0, 0.5, 3, 6, 6.5, 100], np.float64)
    if np.dtype(dtype).kind == "f":
        values = np.concatenate([values, [np.nan, np.inf, -np.inf]])
    xv = values.astype(dtype)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.constant(xv)
        relu, relu6 = gr.apply_op("Relu", x), gr.apply_op("Relu6", x)
    got, got6 = gr.Session(graph, backend="numpy").run([relu, relu6])
    assert got.dtype == got6.dtype == dtype
    np.testing.assert_array_equal(got, np.maximum(xv, 0))
    np.testing.assert_array_equal(got6, np.minimum(np.maximum(xv, 0), 6))


@pytest.mark.parametrize("shape, axes, keep, dtype", [
    ((8, 32, 32, 16), (0, 1, 2), False, np.float32),      # rows enough: a product with ones
    ((8, 32, 32, 16), (0, 1, 2), True, np.float64),
    ((4, 40, 3), (0,), False, np.float32),
    ((3, 5), (0,), True, np.float32),                     # few rows: np.sum
    ((70, 6), (0,), False, np.int64),                     # integers: np.sum
    ((64, 4), (0, 1), False, np.float32),                 # every axis: np.sum
])
def test_a_groups_leading_sum_is_numpys(shape, axes, keep, dtype):
    rng = np.random.default_rng(3)
    value = (rng.standard_normal(shape) * 10).astype(dtype)
    after = SumAfter(None, axes, keep, 0)    # (the tensor and row size are not read here)
    got = _leading_sum(value, after)
    expected = np.sum(value.astype(np.float64), axis=axes, keepdims=keep)
    assert got.shape == expected.shape and got.dtype == value.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)
    strided = value[..., ::2] if value.ndim > len(axes) else value   # not contiguous: np.sum
    np.testing.assert_allclose(_leading_sum(strided, after),
                               np.sum(strided.astype(np.float64), axis=axes, keepdims=keep), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sums_are_numpys_column_sums(dtype):
    from gradreg import kernel_support as ks
    rng = np.random.default_rng(5)
    matrix = (rng.standard_normal((8 * 32 * 32, 24)) * 10).astype(dtype)
    got = ks.column_sums(matrix)
    assert got.shape == (24,) and got.dtype == dtype
    np.testing.assert_allclose(got, matrix.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-3)
    assert ks.column_sums(np.zeros((0, 3), dtype)).tolist() == [0.0, 0.0, 0.0]
