"""NthElement and IsotonicRegression: definitions, shape functions, NumPy kernels and rules.

NthElement picks the n-th smallest value along the last axis (the n-th largest with
``reverse``); its gradient goes to the inputs equal to it, shared equally among ties, as
TensorFlow's rule. IsotonicRegression fits, row by row along the last axis, the non-increasing
sequence nearest in least squares (pool adjacent violators); ``segments`` numbers the pooled
blocks. Its gradient is the incoming gradient averaged over each block (the fit is the block
mean of the input).
"""
from __future__ import annotations

import numpy as np

from gradreg.autodiff import rules
from gradreg.build.builders import apply_op
from gradreg.model.shapes import TensorShape
from gradreg_plugins.nn import family
from gradreg_plugins.nn.kernels import kernel

op = family.op

# -- NthElement --------------------------------------------------------------------------------------------

@kernel("NthElement")
def _nth_element(op, ctx):
    reverse = bool(op.get_attr("reverse"))

    def compute(x, n):
        if np.ndim(n) != 0:
            raise ValueError(f"N must be scalar, got shape {list(np.shape(n))}")
        n = int(n)
        if x.ndim < 1:
            raise ValueError(f"Input must be >= 1-D, got shape {list(x.shape)}")
        if not 0 <= n < x.shape[-1]:
            raise ValueError(f"Input must have at least n+1 columns, got {x.shape[-1]} columns for n={n}")
        k = x.shape[-1] - 1 - n if reverse else n
        return np.partition(x, k, axis=-1)[..., k]
    return compute


def _nth_element_shape(ctx):
    x = ctx.input_shape(0)
    if x.rank == 0:
        raise ctx.error("Input must be >= 1-D")
    n = ctx.input_value(1)
    if n is not None and x.rank is not None and x[-1] is not None and not 0 <= int(n) < x[-1]:
        raise ctx.error(f"Input must have last dimension > n = {int(n)}, got shape {x}")
    return x[:-1] if x.rank is not None else TensorShape(None)


op("NthElement", inputs=["input: T", "n: int32"], outputs=["values: T"],
   attrs=["reverse: bool = false",
          "T: {float32, float64, int32, uint8, int16, int8, int64, bfloat16, uint16, float16, uint32, uint64}"],
   shape=_nth_element_shape)


@family.gradient("NthElement")
def _nth_element_grad(op, grad):
    x, value = op.inputs[0], op.outputs[0]
    hits = apply_op("Cast", apply_op("Equal", apply_op("ExpandDims", value, rules.ints(-1)), x), DstT=grad.dtype)
    count = apply_op("Sum", hits, rules.ints(-1), keep_dims=True)
    return hits / count * apply_op("ExpandDims", grad, rules.ints(-1)), None


# -- IsotonicRegression --------------------------------------------------------------------------------------

def isotonic_row(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-increasing least-squares fit of one row and its block numbers."""
    sums: list[float] = []
    counts: list[int] = []
    for v in values:
        sums.append(float(v))
        counts.append(1)
        # Pool while the previous block's mean is below this one's (an increase).
        while len(sums) > 1 and sums[-2] * counts[-1] < sums[-1] * counts[-2]:
            last_sum, last_count = sums.pop(), counts.pop()
            sums[-1] += last_sum
            counts[-1] += last_count
    means = np.repeat(np.array(sums) / np.array(counts), counts)
    return means, np.repeat(np.arange(len(counts), dtype=np.int32), counts)


@kernel("IsotonicRegression")
def _isotonic_regression(op, ctx):
    out_dtype = op.outputs[0].dtype.base_dtype.storage

    def compute(x):
        if x.ndim < 1:
            raise ValueError(f"input must be at least 1-D, got shape {list(x.shape)}")
        rows = x.reshape(-1, x.shape[-1]) if x.shape[-1] else x.reshape(-1, 0)
        fit = np.zeros(rows.shape, np.float64)
        segments = np.zeros(rows.shape, np.int32)
        for i, row in enumerate(rows):
            if row.size:
                fit[i], segments[i] = isotonic_row(row.astype(np.float64))
        return fit.astype(out_dtype).reshape(x.shape), segments.reshape(x.shape)
    return compute


op("IsotonicRegression", inputs=["input: T"], outputs=["output: output_dtype", "segments: int32"],
   attrs=["T: {float32, float64, int32, uint8, int16, int8, int64, bfloat16, uint16, float16, uint32, uint64}",
          "output_dtype: {float16, bfloat16, float32, float64} = float32"],
   shape=lambda ctx: [ctx.input_shape(0), ctx.input_shape(0)])


@family.gradient("IsotonicRegression")
def _isotonic_regression_grad(op, grad, _grad_segments):
    # Each output is the mean of its block's inputs: the gradient is each block's mean
    # gradient. Blocks are numbered within rows: offset them by row so one segment sum serves.
    segments = op.outputs[1]
    shape = apply_op("Shape", grad)
    width = apply_op("StridedSlice", shape, rules.ints([-1]), rules.ints([0]), rules.ints([1]), end_mask=1,
                     shrink_axis_mask=1)
    flat_segments = apply_op("Reshape", segments, apply_op("Pack", [np.int32(-1), width], axis=0))
    rows = apply_op("Shape", flat_segments)
    row_offsets = apply_op("ExpandDims", apply_op("Range", 0, apply_op("StridedSlice", rows, rules.ints([0]),
                                                                       rules.ints([1]), rules.ints([1]),
                                                                       shrink_axis_mask=1), 1) * width,
                           rules.ints(-1))
    ids = apply_op("Reshape", flat_segments + row_offsets, rules.ints([-1]))
    total = apply_op("Size", grad)
    flat_grad = apply_op("Reshape", grad, rules.ints([-1]))
    sums = apply_op("UnsortedSegmentSum", flat_grad, ids, total)
    counts = apply_op("UnsortedSegmentSum", apply_op("OnesLike", flat_grad), ids, total)
    means = sums / apply_op("Maximum", counts, apply_op("OnesLike", counts))
    return apply_op("Reshape", apply_op("GatherV2", means, ids, 0), shape)
