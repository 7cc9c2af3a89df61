"""NumPy kernels of the onnx family, replacing the onnx.reference fallback
(:mod:`gradreg_plugins.onnx.reference_kernels`) where it is slow or wrong. Each follows the ONNX
operator's specification at the family's opset. The recurrent ops, GridSample, DeformConv and
MaxRoiPool have their kernels in topic modules (:mod:`recurrent`, :mod:`grid_sample`,
:mod:`roi`) shared with their gradient rules; the ops with subgraphs in :mod:`control_flow`."""
from __future__ import annotations

import math
from types import ModuleType

import numpy as np

from gradreg.errors import ExecutionError, UnknownOpError, describe_node
from gradreg.registry.kernels import IDENTITY
from gradreg_plugins.onnx import family, grid_sample, recurrent, roi
from gradreg_plugins.onnx.nodes import dtype_of_element_type, input_layout
from gradreg_plugins.onnx.schemas import INSTALL_HINT, all_schemas
from gradreg_plugins.onnx.windows import Geometry, attr_list, geometry, transpose_geometry, windows

kernel = family.kernel


def node_error(op, message: str) -> ExecutionError:
    return ExecutionError(f"{describe_node(op.name, op.type)}: {message}", op.name, op.type)


def _windowed(op, x: np.ndarray, g: Geometry) -> Geometry:
    """``g``, if its window fits the padded input at least once along every axis."""
    if min(g.out, default=1) < 1:
        n = len(g.kernel)
        padded = [s + g.pads[i] + g.pads[i + n] for i, s in enumerate(x.shape[2:])]
        raise node_error(op, f"the window {list(g.effective)} (kernel {list(g.kernel)}, dilations "
                             f"{list(g.dilations)}) is larger than the padded input {padded}")
    return g


# -- optionals: a value or None (onnx.reference's Optional wraps its value in a list) -------------

@kernel("onnx::Optional")
def _optional(op, ctx):
    return lambda *value: value[0] if value else None


@kernel("onnx::OptionalHasElement")
def _optional_has_element(op, ctx):
    return lambda *value: np.array(bool(value) and value[0] is not None)


@kernel("onnx::OptionalGetElement")
def _optional_get_element(op, ctx):
    def compute(value):
        if value is None:
            raise node_error(op, "the optional input is empty")
        return value
    return compute


# -- convolution ----------------------------------------------------------------------------------

def _reference_kernels(op) -> ModuleType:
    """:mod:`gradreg_plugins.onnx.reference_kernels`; UnknownOpError naming the node and the extra
    to install when the onnx package is missing."""
    try:
        # an optional dependency: onnx.reference runs what these kernels do not, and needs onnx
        import onnx.reference  # noqa: F401

        from gradreg_plugins.onnx import reference_kernels
    except ImportError:
        raise UnknownOpError(f"{describe_node(op.name, op.type)}: this ONNX op runs on onnx's reference "
                             f"implementation, which needs the onnx package: {INSTALL_HINT}") from None
    return reference_kernels


def _fallback(op, ctx):
    """onnx.reference's kernel of ``op``."""
    return _reference_kernels(op).reference_kernel(op, ctx)


# Filters that are equal bit for bit: an output channel whose filter (and bias) repeats an earlier
# one's is that channel's copy in exact arithmetic, and the kernel keeps it so. BLAS does not:
# OpenBLAS's sgemm sums some columns of a product in another order than others (its micro-kernel's
# lanes and edges), so such channels come out an ulp apart, which a Softmax over logits near 1e10
# (onnx's light SqueezeNet, every filter 0.02) turns into 1/304 where onnxruntime and onnx's stored
# output have 1/1000. The kernel multiplies each distinct filter once instead. Finding them costs
# one look at the filters' first column when no two filters start alike (the usual case: 5-15 us);
# otherwise sums of the rows' first 64 entries, then of whole rows, narrow the rows that might
# repeat (pruned filters share their zeros), and only those are compared whole.
_HEAD_COLUMNS = 64
_SET_ROWS = 128
_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_HASH_STEP = np.uint64(0x9E3779B97F4A7C15)


def _repeated(keys: np.ndarray) -> np.ndarray:
    """Which entries of ``keys`` another entry equals."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    same = ordered[1:] == ordered[:-1]
    mask = np.zeros(keys.shape, dtype=bool)
    mask[order[1:][same]] = True
    mask[order[:-1][same]] = True
    return mask


def _row_sums(rows: np.ndarray) -> np.ndarray:
    """The sums of ``rows`` (unsigned bit patterns) modulo 2**64: rows equal bit for bit sum alike."""
    if rows.flags.c_contiguous and rows.shape[1] * rows.itemsize % 8 == 0:
        return rows.view(np.uint64).sum(axis=1)                # no widened copy
    return rows.sum(axis=1, dtype=np.uint64)


def _leaders(rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each of ``rows`` (unsigned bit patterns; rows equal bit for bit have equal ``keys``), the
    position of the first row equal to it."""
    leaders = np.arange(len(rows))
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    bounds = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
    for start, stop in zip(bounds[:-1], bounds[1:]):
        if stop - start < 2:
            continue
        members = order[start:stop]
        if members.size == len(rows):                          # every row: compared in place
            same = (rows == rows[members[0]]).all(axis=1)[members]
        else:
            same = (rows[members] == rows[members[0]]).all(axis=1)
        leaders[members[same]] = members[0]
        rest = members[~same]
        if rest.size > 1:                                      # equal keys, other entries: weigh by position
            weights = np.arange(1, rows.shape[1] + 1, dtype=np.uint64) * _HASH_STEP
            leaders[rest] = rest[_leaders(rows[rest], rows[rest].astype(np.uint64) @ weights)]
    return leaders


def _all_different(column: np.ndarray) -> bool:
    """Whether no two entries of ``column`` are equal: a set for a few (fewer calls into NumPy, whose
    sort costs ~25 us in a run where other kernels leave the caches cold), else a sort."""
    if len(column) <= _SET_ROWS:
        return len(set(column.tolist())) == len(column)
    ordered = np.sort(column)
    return not (ordered[1:] == ordered[:-1]).any()


def distinct_filters(filters: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(distinct, index)`` with ``distinct[index]`` equal to the rows of ``filters`` (M, K) bit
    for bit and ``distinct`` holding each row once, or None when no two rows are equal."""
    m, k = filters.shape
    unsigned = _UNSIGNED.get(filters.dtype.itemsize)
    if m < 2 or k == 0 or unsigned is None:
        return None
    if _all_different(filters[:, 0].view(unsigned)):
        return None
    bits = filters.view(unsigned)
    candidates = np.arange(m)
    candidates = candidates[_repeated(_row_sums(bits[:, :_HEAD_COLUMNS]))]
    if candidates.size == 0:
        return None
    rows = bits if candidates.size == m else bits[candidates]
    sums = _row_sums(rows)
    repeated = _repeated(sums)
    if not repeated.any():
        return None
    if not repeated.all():
        candidates, rows, sums = candidates[repeated], rows[repeated], sums[repeated]
    index = np.arange(m)
    index[candidates] = candidates[_leaders(rows, sums)]
    firsts, inverse = np.unique(index, return_inverse=True)
    return (filters[firsts], inverse) if firsts.size < m else None


def _columns(op, ctx, x: np.ndarray, g: Geometry, group: int) -> np.ndarray:
    """(N, G, positions, C/G * taps): each output position's window, all input channels of its
    group. A 1x1 convolution's (stride 1, no pads) is the input itself, transposed: no copy."""
    n, c = x.shape[:2]
    nd = x.ndim - 2
    if not any(g.pads) and all(k == 1 and st == 1 for k, st in zip(g.kernel, g.strides)):
        return x.reshape(n, group, c // group, -1).transpose(0, 1, 3, 2)
    cols = windows(x, g, 0)                                      # (N, C, O..., K...)
    ctx.check_elements(math.prod(cols.shape), op)
    cols = cols.reshape((n, group, c // group) + cols.shape[2:])
    cols = cols.transpose((0, 1) + tuple(range(3, 3 + nd)) + (2,) + tuple(range(3 + nd, 3 + 2 * nd)))
    return cols.reshape(n, group, math.prod(g.out), -1)


@kernel("onnx::Conv")
def _conv(op, ctx):
    """im2col: each output position's window (all input channels of its group) times the filter;
    with one group, a filter repeated bit for bit is multiplied once (its channels come out equal)."""
    group = int(op.get_attr("group"))
    last: list[tuple] = [((), None)]                              # the last sizes' geometry (~5 us to work out)

    def compute(x, w, *bias):
        sizes = (x.shape[2:], w.shape[2:])
        known, g = last[0]
        if known != sizes:
            g = _windowed(op, x, geometry(op, *sizes))
            last[0] = (sizes, g)
        if w.shape[1] * group != x.shape[1] or w.shape[0] % group:
            raise node_error(op, f"filter {list(w.shape)} does not fit input {list(x.shape)} with group {group}")
        n, m = x.shape[0], w.shape[0]
        ctx.check_elements(n * m * math.prod(g.out), op)
        cols = _columns(op, ctx, x, g, group)
        filters = w.reshape(group, m // group, -1)
        distinct = distinct_filters(filters[0]) if group == 1 else None
        if distinct is None:
            out = np.matmul(cols, filters.transpose(0, 2, 1))    # (N, G, positions, M/G)
        else:
            out = np.matmul(cols, distinct[0].T)[..., distinct[1]]
        out = out.transpose(0, 1, 3, 2).reshape((n, m) + g.out)
        if bias:
            out = out + bias[0].reshape((m,) + (1,) * len(g.out))
        return out.astype(x.dtype, copy=False)
    return compute


@kernel("onnx::ConvTranspose")
def _conv_transpose(op, ctx):
    """col2im: every input position's contribution (filter times its channels) added into the
    output at stride spacing, one strided add per filter tap, then cropped by the pads."""
    group = int(op.get_attr("group"))

    def compute(x, w, *bias):
        n, c = x.shape[:2]
        in_sizes, kernel = x.shape[2:], w.shape[2:]
        nd = len(in_sizes)
        strides = attr_list(op, "strides", nd, 1)
        dilations = attr_list(op, "dilations", nd, 1)
        effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        begins, out_sizes = transpose_geometry(op, in_sizes, effective, strides)
        m_group = w.shape[1]
        ctx.check_elements(n * m_group * group * int(np.prod(out_sizes, dtype=np.int64)), op)
        xs = x.reshape(n, group, c // group, -1)
        filters = w.reshape(group, c // group, -1).transpose(0, 2, 1)          # (G, M/G * K, C/G)
        cols = np.matmul(filters, xs).reshape((n, group, m_group) + tuple(kernel) + tuple(in_sizes))
        sizes = [max(st * (i - 1) + e, b + o) for i, st, e, b, o in zip(in_sizes, strides, effective, begins,
                                                                           out_sizes)]
        full = np.zeros((n, group, m_group) + tuple(sizes), dtype=np.result_type(x.dtype, w.dtype))
        for tap in np.ndindex(*kernel):
            target = tuple(slice(k * d, k * d + st * (i - 1) + 1, st)
                           for k, d, st, i in zip(tap, dilations, strides, in_sizes))
            full[(slice(None),) * 3 + target] += cols[(slice(None),) * 3 + tap]
        crop = tuple(slice(b, b + o) for b, o in zip(begins, out_sizes))
        out = full[(slice(None),) * 3 + crop].reshape((n, group * m_group) + tuple(out_sizes))
        if bias:
            out = out + bias[0].reshape((group * m_group,) + (1,) * nd)
        return out.astype(x.dtype, copy=False)
    return compute


# -- pooling --------------------------------------------------------------------------------------

def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@kernel("onnx::MaxPool")
def _max_pool(op, ctx):
    if op.get_attr("storage_order"):
        return _fallback(op, ctx)
    kernel = tuple(op.get_attr("kernel_shape"))
    ceil_mode = bool(op.get_attr("ceil_mode"))
    with_indices = len(op.outputs) == 2

    def compute(x):
        g = _windowed(op, x, geometry(op, x.shape[2:], kernel, ceil_mode))
        view = windows(x, g, _lowest(x.dtype))
        flat = view.reshape(view.shape[:2 + len(kernel)] + (-1,))
        y = flat.max(axis=-1)
        if not with_indices:
            return y
        return y, _argmax_indices(flat, g, x.shape)
    return compute


def _argmax_indices(flat: np.ndarray, g: Geometry, shape: tuple) -> np.ndarray:
    """MaxPool's Indices: each maximum's position in the flattened (unpadded) input."""
    n_spatial = len(g.kernel)
    tap = np.unravel_index(flat.argmax(axis=-1), g.kernel)                # kernel coordinates
    index = np.zeros(flat.shape[:-1], dtype=np.int64)
    grids = np.meshgrid(*[np.arange(o) for o in g.out], indexing="ij")
    for axis in range(n_spatial):
        coord = grids[axis] * g.strides[axis] + tap[axis] * g.dilations[axis] - g.pads[axis]
        index = index * shape[2 + axis] + coord
    offsets = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[0], shape[1], *([1] * n_spatial))
    return index + offsets * int(np.prod(shape[2:], dtype=np.int64))


@kernel("onnx::AveragePool")
def _average_pool(op, ctx):
    if op.get_attr("ceil_mode"):
        return _fallback(op, ctx)
    kernel = tuple(op.get_attr("kernel_shape"))
    include_pad = bool(op.get_attr("count_include_pad"))

    def compute(x):
        g = _windowed(op, x, geometry(op, x.shape[2:], kernel))
        axes = tuple(range(-len(kernel), 0))
        total = windows(x, g, 0).sum(axis=axes)
        if include_pad:
            return (total / np.prod(kernel)).astype(x.dtype, copy=False)
        counts = windows(np.ones((1, 1) + x.shape[2:], dtype=x.dtype), g, 0).sum(axis=axes)
        return (total / counts).astype(x.dtype, copy=False)
    return compute


@kernel("onnx::LpPool")
def _lp_pool(op, ctx):
    if op.get_attr("ceil_mode"):
        return _fallback(op, ctx)
    kernel = tuple(op.get_attr("kernel_shape"))
    p = float(op.get_attr("p"))

    def compute(x):
        g = _windowed(op, x, geometry(op, x.shape[2:], kernel))
        total = (np.abs(windows(x, g, 0)) ** p).sum(axis=tuple(range(-len(kernel), 0)))
        return (total ** (1.0 / p)).astype(x.dtype, copy=False)
    return compute


# -- the common ops of real models, in NumPy -------------------------------------------------------
#
# These run without the onnx package and skip onnx.reference's per-call overhead. A node with a
# bfloat16, float8 or string value still runs on onnx.reference, which computes in those types.

def numpy_kernel(*op_types: str):
    """Register ``factory(op, ctx)`` for ONNX ops on plain NumPy types (else onnx.reference)."""
    def register(factory):
        def guarded(op, ctx):
            if any(t.dtype is None or t.dtype.kind not in "fiub" or t.dtype.base_dtype.name == "bfloat16"
                   for t in (*op.inputs, *op.outputs)):
                return _fallback(op, ctx)
            return factory(op, ctx)
        for op_type in op_types:
            kernel(f"onnx::{op_type}")(guarded)
        return factory
    return register


def _same_type(fn):
    """``fn`` with its result cast back to the first input's dtype (NumPy promotes some scalars)."""
    return lambda x, *rest: np.asarray(fn(x, *rest)).astype(x.dtype, copy=False)


# Ops whose NumPy function already returns the output's dtype.
_EXACT = {f"onnx::{t}" for t in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Not",
                                 "Where", "Add", "Sub", "Mul", "Neg", "Abs", "MatMul")}
for _op_type, _fn in {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Neg": np.negative, "Abs": np.abs,
    "Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log, "Tanh": np.tanh, "Sin": np.sin, "Cos": np.cos,
    "Floor": np.floor, "Ceil": np.ceil, "Reciprocal": np.reciprocal, "MatMul": np.matmul,
    "Relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "Sigmoid": lambda x: 0.5 * (1 + np.tanh(0.5 * x)),     # no overflow for large |x|
    "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Not": np.logical_not,
    "Where": np.where,
}.items():
    numpy_kernel(_op_type)(lambda op, ctx, _fn=_fn: _fn if op.type in _EXACT else _same_type(_fn))


@numpy_kernel("Div")
def _div(op, ctx):
    if op.inputs[0].dtype.kind != "f":
        return _fallback(op, ctx)     # integer Div truncates as C does
    return np.divide


@numpy_kernel("LeakyRelu")
def _leaky_relu(op, ctx):
    alpha = op.get_attr("alpha")
    return lambda x: np.where(x < 0, x * x.dtype.type(alpha), x)


@numpy_kernel("Identity")
def _identity(op, ctx):
    return IDENTITY


@numpy_kernel("Gemm")
def _gemm(op, ctx):
    alpha, beta = op.get_attr("alpha"), op.get_attr("beta")
    trans_a, trans_b = op.get_attr("transA"), op.get_attr("transB")

    def compute(a, b, *c):
        y = np.matmul(a.T if trans_a else a, b.T if trans_b else b)
        if alpha != 1:
            y = y * y.dtype.type(alpha)
        if c:
            y = y + (c[0] * c[0].dtype.type(beta) if beta != 1 else c[0])
        return y.astype(a.dtype, copy=False)
    return compute


def _softmax_parts(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted, np.exp(shifted).sum(axis=axis, keepdims=True)


@numpy_kernel("Softmax")
def _softmax(op, ctx):
    axis = op.get_attr("axis")

    def compute(x):
        shifted, total = _softmax_parts(x, axis)
        return np.exp(shifted) / total
    return compute


@numpy_kernel("LogSoftmax")
def _log_softmax(op, ctx):
    axis = op.get_attr("axis")

    def compute(x):
        shifted, total = _softmax_parts(x, axis)
        return shifted - np.log(total)
    return compute


@numpy_kernel("Reshape")
def _reshape(op, ctx):
    allow_zero = op.get_attr("allowzero")

    def compute(x, shape):
        dims = [int(d) for d in shape]
        if not allow_zero:   # 0 copies the input's dimension there
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return np.reshape(x, dims)
    return compute


@numpy_kernel("Flatten")
def _flatten(op, ctx):
    axis = op.get_attr("axis")

    def compute(x):
        cut = axis + x.ndim if axis < 0 else axis
        return x.reshape(int(np.prod(x.shape[:cut], dtype=np.int64)), int(np.prod(x.shape[cut:], dtype=np.int64)))
    return compute


@numpy_kernel("Transpose")
def _transpose(op, ctx):
    perm = op.get_attr("perm")
    return lambda x: np.transpose(x, perm if perm else None)


@numpy_kernel("Unsqueeze")
def _unsqueeze(op, ctx):
    def compute(x, axes):
        axes = np.reshape(axes, -1)
        rank = x.ndim + len(axes)
        return np.expand_dims(x, tuple(sorted(int(a) + rank if a < 0 else int(a) for a in axes)))
    return compute


@numpy_kernel("Squeeze")
def _squeeze(op, ctx):
    def compute(x, *axes):
        if not axes:
            return np.squeeze(x)
        return np.squeeze(x, axis=tuple(int(a) for a in np.reshape(axes[0], -1)))
    return compute


@numpy_kernel("Concat")
def _concat(op, ctx):
    axis = op.get_attr("axis")
    return lambda *xs: np.concatenate(xs, axis=axis)


@numpy_kernel("Shape")
def _shape(op, ctx):
    start, end = op.get_attr("start"), op.get_attr("end")
    return lambda x: np.array(x.shape[start:end], dtype=np.int64)


@numpy_kernel("Gather")
def _gather(op, ctx):
    axis = op.get_attr("axis")
    return lambda data, indices: np.take(data, indices, axis=axis)


@numpy_kernel("Expand")
def _expand(op, ctx):
    return lambda x, shape: np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(int(d) for d in shape))))


@numpy_kernel("Clip")
def _clip(op, ctx):
    layout = [i is not None for i in _input_positions(op)]

    def compute(x, *bounds):
        found = iter(bounds)
        low = next(found) if layout[1] else None
        high = next(found) if len(layout) > 2 and layout[2] else None
        y = x if low is None else np.maximum(x, low)
        return y if high is None else np.minimum(y, high)
    return compute


def _input_positions(op) -> list:
    layout = input_layout(op)
    return layout + [None] * (3 - len(layout))


def _reduce(fn):
    def factory(op, ctx):
        keepdims = bool(op.get_attr("keepdims"))
        noop = bool(op.get_attr("noop_with_empty_axes"))

        def compute(x, *axes):
            picked = tuple(int(a) for a in np.reshape(axes[0], -1)) if axes else ()
            if not picked:
                if noop:
                    return x
                picked = None
            return np.asarray(fn(x, axis=picked, keepdims=keepdims)).astype(x.dtype, copy=False)
        return compute
    return factory


numpy_kernel("ReduceSum")(_reduce(np.sum))
numpy_kernel("ReduceMean")(_reduce(np.mean))


@numpy_kernel("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(op, ctx):
    fn = np.mean if op.type == "onnx::GlobalAveragePool" else np.max
    return lambda x: fn(x, axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype, copy=False)


@kernel("onnx::GlobalLpPool")
def _global_lp_pool(op, ctx):
    """(sum over the spatial axes of |x|^p)^(1/p), per batch row and channel (onnx.reference has
    no GlobalLpPool)."""
    p = float(op.get_attr("p"))

    def compute(x):
        axes = tuple(range(2, x.ndim))
        return (np.sum(np.abs(x) ** p, axis=axes, keepdims=True) ** (1 / p)).astype(x.dtype, copy=False)
    return compute


@kernel("onnx::LRN")
def _lrn(op, ctx):
    """y = x / (bias + alpha / size * square_sum)^beta, square_sum over the channels from
    c - floor((size - 1) / 2) to c + ceil((size - 1) / 2) (onnx.reference loops over the batch
    instead of the channels, and only takes 4-d inputs)."""
    size = int(op.get_attr("size"))
    alpha, beta, bias = op.get_attr("alpha"), op.get_attr("beta"), op.get_attr("bias")
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2

    def compute(x):
        squares = np.square(x)
        widths = [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2)
        padded = np.cumsum(np.pad(squares, widths), axis=1)
        padded = np.concatenate([np.zeros_like(padded[:, :1]), padded], axis=1)
        channels = x.shape[1]
        sums = padded[:, size:size + channels] - padded[:, :channels]
        return (x / (bias + (alpha / size) * sums) ** beta).astype(x.dtype, copy=False)
    return compute


@kernel("onnx::LayerNormalization")
def _layer_normalization(op, ctx):
    """Normalization over the axes from ``axis`` on, statistics computed in stash_type's precision
    (onnx.reference only takes float32)."""
    stash = dtype_of_element_type(int(op.get_attr("stash_type"))).base_dtype.storage
    epsilon = op.get_attr("epsilon")
    n_out = len(op.outputs)
    stats = [t.known_dtype.base_dtype.storage for t in op.outputs[1:]]

    def compute(x, scale, *bias):
        axis = int(op.get_attr("axis")) % x.ndim
        axes = tuple(range(axis, x.ndim))
        wide = x.astype(stash, copy=False)
        mean = np.mean(wide, axis=axes, keepdims=True)
        inv_std = 1 / np.sqrt(np.mean(np.square(wide - mean), axis=axes, keepdims=True) + epsilon)
        y = ((wide - mean) * inv_std).astype(x.dtype, copy=False) * scale
        if bias:
            y = y + bias[0]
        outs = [y.astype(x.dtype, copy=False)] + [v.astype(d, copy=False) for v, d in zip((mean, inv_std), stats)]
        return outs[0] if n_out == 1 else tuple(outs[:n_out])
    return compute


@kernel("onnx::MeanVarianceNormalization")
def _mean_variance_normalization(op, ctx):
    """(x - mean) / sqrt(var + 1e-9) over ``axes`` (onnx.reference runs the function body, whose
    float32 epsilon fails on float64 inputs)."""
    axes = tuple(int(a) for a in (op.get_attr("axes") or (0, 2, 3)))

    def compute(x):
        mean = np.mean(x, axis=axes, keepdims=True)
        variance = np.mean(np.square(x), axis=axes, keepdims=True) - np.square(mean)
        return ((x - mean) / np.sqrt(variance + 1e-9)).astype(x.dtype, copy=False)
    return compute


_PAD_MODES = {b"constant": "constant", b"reflect": "reflect", b"edge": "edge", b"wrap": "wrap"}


@kernel("onnx::Pad")
def _pad(op, ctx):
    """Pad with negative pads too (they remove elements; onnx.reference refuses them)."""
    mode = _PAD_MODES.get(op.get_attr("mode") or b"constant")
    if mode is None:
        raise node_error(op, f"unknown pad mode {op.get_attr('mode')!r}")

    layout = input_layout(op) + [None, None]

    def compute(*args):
        data, pads = args[0], args[1]
        value = args[layout[2]] if layout[2] is not None else None
        axes = args[layout[3]] if layout[3] is not None else range(data.ndim)
        axes = [int(a) + data.ndim if int(a) < 0 else int(a) for a in np.asarray(axes).reshape(-1)]
        pads = [int(p) for p in np.asarray(pads).reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise node_error(op, f"{len(pads)} pads for {len(axes)} axes")
        crop = [slice(None)] * data.ndim
        widths = [(0, 0)] * data.ndim
        for i, axis in enumerate(axes):
            begin, end = pads[i], pads[i + len(axes)]
            crop[axis] = slice(max(0, -begin), data.shape[axis] - max(0, -end))
            widths[axis] = (max(0, begin), max(0, end))
        cropped = data[tuple(crop)]
        if mode == "constant":
            fill = np.asarray(value).reshape(()) if value is not None else 0
            return np.pad(cropped, widths, mode="constant", constant_values=fill).astype(data.dtype, copy=False)
        return np.pad(cropped, widths, mode=mode).astype(data.dtype, copy=False)
    return compute


@kernel("onnx::Scatter")
def _scatter(op, ctx):
    """Scatter (deprecated since opset 11, which onnx.reference no longer runs) is ScatterElements
    without a reduction: data with updates written at indices along ``axis``."""
    axis = int(op.get_attr("axis"))

    def compute(data, indices, updates):
        out = np.array(data, copy=True)
        index = np.asarray(indices).astype(np.int64)
        index = np.where(index < 0, index + data.shape[axis], index)
        # the indices cover a corner of the data on the other axes (no broadcasting)
        corner = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))
        np.put_along_axis(out[corner], index, updates, axis=axis)
        return out
    return compute


@numpy_kernel("BatchNormalization")
def _batch_norm(op, ctx):
    if op.get_attr("training_mode") or len(op.outputs) > 1:
        return _fallback(op, ctx)
    epsilon = op.get_attr("epsilon")

    def compute(x, scale, bias, mean, var):
        shape = (-1,) + (1,) * (x.ndim - 2)
        factor = (scale / np.sqrt(var + var.dtype.type(epsilon))).reshape(shape)
        return ((x - mean.reshape(shape)) * factor + bias.reshape(shape)).astype(x.dtype, copy=False)
    return compute


@numpy_kernel("Cast")
def _cast(op, ctx):
    target = op.outputs[0].dtype.base_dtype.storage
    return lambda x: x.astype(target)


@numpy_kernel("Dropout")
def _dropout(op, ctx):
    layout = _input_positions(op)
    if layout[2] is not None or len(op.outputs) > 1:   # training mode given, or the mask wanted
        return _fallback(op, ctx)
    return lambda x, *rest: x


# -- elementwise ------------------------------------------------------------------------------------

def _erf_function():
    """erf in the input's precision (onnx.reference computes it in float32)."""
    # start-up: scipy.special takes ~0.1 s to import, and only Erf and Gelu need it
    from scipy.special import erf
    return lambda x: erf(x).astype(x.dtype, copy=False)


@kernel("onnx::Erf")
def _erf(op, ctx):
    return _erf_function()


@numpy_kernel("Gelu")
def _gelu(op, ctx):
    if op.get_attr("approximate") == b"tanh":
        c = np.sqrt(2 / np.pi)
        return lambda x: (0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))).astype(x.dtype, copy=False)
    erf = _erf_function()
    return lambda x: (0.5 * x * (1 + erf(x / np.sqrt(2)))).astype(x.dtype, copy=False)


# -- recurrent ops: every attribute honoured (gradreg_plugins.onnx.recurrent) ---------------------------

for _op_type in ("onnx::LSTM", "onnx::GRU", "onnx::RNN"):
    kernel(_op_type)(recurrent.kernel_factory)
kernel("onnx::GridSample")(grid_sample.kernel_factory)
kernel("onnx::MaxRoiPool")(roi.max_roi_pool_kernel)
kernel("onnx::DeformConv")(grid_sample.deform_conv_kernel)


@kernel("onnx::AffineGrid")
def _affine_grid(op, ctx):
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1) over the output's pixel centres (or corners, with
    align_corners), in the input's precision (onnx.reference computes in float32)."""
    align_corners = bool(op.get_attr("align_corners"))

    def compute(theta, size):
        spatial = [int(s) for s in np.asarray(size).reshape(-1)[2:]]

        def axis(length):
            if align_corners:
                return np.linspace(-1, 1, length) if length > 1 else np.zeros(1)
            return (np.arange(length) * 2 + 1) / length - 1
        mesh = np.meshgrid(*[axis(n) for n in spatial], indexing="ij")
        base = np.stack(list(mesh[::-1]) + [np.ones_like(mesh[0])], axis=-1)    # (..., x, y[, z], 1)
        grid = np.einsum("...k,njk->n...j", base, theta.astype(np.float64))
        return grid.astype(theta.dtype, copy=False)
    return compute


kernel("onnx::Upsample")(lambda op, ctx: _reference_kernels(op).upsample_kernel(op, ctx))


@kernel("onnx::SequenceInsert")
def _sequence_insert(op, ctx):
    """Insert at ``position`` in [-n, n] (n, or no position: append; onnx.reference wraps n to 0)."""
    def compute(sequence, tensor, *position):
        out = list(sequence)
        if not position:
            out.append(tensor)
            return out
        index = int(np.asarray(position[0]).reshape(-1)[0])
        if not -len(out) <= index <= len(out):
            raise node_error(op, f"position {index} is outside [-{len(out)}, {len(out)}]")
        out.insert(index + len(out) if index < 0 else index, tensor)
        return out
    return compute


def _register_fallbacks() -> None:
    """onnx.reference's kernel for every op this family gave no kernel of its own (the control-flow
    kernels are imported first, see the family's kernel_modules)."""
    table = family.kernels.setdefault("numpy", {})
    for schema in all_schemas():
        table.setdefault(schema.op_type, _fallback)


_register_fallbacks()
