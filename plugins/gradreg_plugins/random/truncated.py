"""TensorFlow's parameterized truncated normal sampler (StatelessParameterizedTruncatedNormal),
bit for bit on CPU.

The output is [sample dims..., batch dims...]: the four parameters (means, stddevs, minvals,
maxvals) broadcast to the batch dims, and each batch member b draws its samples from one Philox
stream shared by all members in order (b = 0, 1, ...), sample s of member b landing at
``s * num_batches + b``. A member's bounds decide how it samples (Robert, 1995; TensorFlow's
comments call it "randn", "uniform" and "exponential" rejection):

* the bounds reach 1.3 standard deviations beyond the mean on one side and the other bound is
  past the mean: normal values (four per block, two for float64), kept within the bounds;
* else, where the (standardized) interval [lo, hi] is narrow (below a cutoff): a block of
  uniform proposals z in [lo, hi] and the next block of uniform u, z kept where
  u <= exp((p - z^2) / 2), p = 0 if lo < 0 else lo^2;
* else: exponential proposals, each pair of uniform values (r, u) of a block giving
  z = lo - log(r) / alpha, kept where u <= exp(-x^2 / 2) and z < hi.

A member whose lower bound is -inf, or whose upper bound is below its mean, is sampled
mirrored (bounds swapped, stddev negated). A member's leftover values in its last block are
dropped: the next member starts at the next block. Arithmetic is in the output type, as
TensorFlow's (float16 rounds every operation to float16); exp and log are the C library's
(float32 log through libm's glibc tables; exp rounded correctly, which glibc's expf is to
within 0.502 units in the last place: a proposal exactly on the acceptance boundary could
differ, about once in 2**23 tests).

TensorFlow splits the output among its intra-op threads above a few hundred elements (its
cost model), each split starting at another offset of the stream: gradreg's values are those of
one thread (``intra_op_parallelism_threads=1``), which are TensorFlow's for small outputs
whatever its thread count.
"""
from __future__ import annotations

import math

import numpy as np

from gradreg.model import dtypes
from gradreg_plugins.random import distributions, libm, philox
from gradreg_plugins.random.philox import PhiloxState

# Consecutive rejections after which TensorFlow gives up: more than 1000 for normal proposals,
# 1000 for the others.
MAX_REJECTIONS = {"randn": 1001, "uniform": 1000, "exponential": 1000}
RANDN_STDDEVS = 1.3            # bounds this far past the mean on one side: sample normals
_FIRST_DRAW = 16               # blocks drawn at first per member (more as needed)


class _Stream:
    """Consecutive Philox blocks from a state, drawn in chunks."""

    def __init__(self, state: PhiloxState):
        self.state = state
        self.position = 0

    def blocks(self, count: int) -> np.ndarray:
        return philox.blocks(self.state.skip(self.position), count)

    def advance(self, count: int) -> None:
        self.position += count


def _exp(x: np.ndarray, storage) -> np.ndarray:
    """exp in the output type: float64 through the C library, else rounded from float64."""
    if storage == np.float64:
        return np.fromiter(map(_c_exp, x.reshape(-1).tolist()), np.float64, count=x.size).reshape(x.shape)
    return np.exp(x.astype(np.float64)).astype(np.float32).astype(storage)


def _c_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _log_uniform(blocks: np.ndarray, dtype) -> np.ndarray:
    """log of the uniform values of ``blocks`` in the output type (log 0 = -inf)."""
    if dtype is dtypes.float64:
        values = distributions.uniform(dtype)(blocks.copy()).reshape(-1)
        return np.fromiter((math.log(v) if v > 0 else -math.inf for v in values.tolist()), np.float64,
                           count=values.size)
    bits = 10 if dtype is dtypes.float16 else 23
    k = blocks.reshape(-1) & np.uint32((1 << bits) - 1)
    k23 = k << np.uint32(23 - bits)
    with np.errstate(divide="ignore"):
        logs = np.where(k23 == 0, np.float32(-np.inf), libm.glibc_logf_of_mantissa(k23))
    return logs.astype(dtype.storage)


class _Member:
    """One batch member's parameters, standardized as TensorFlow does, and its sampling method."""

    def __init__(self, mean, stddev, minval, maxval, storage):
        t = storage.type
        if (np.isinf(minval) and minval < 0) or maxval < mean:
            minval, maxval, stddev = maxval, minval, -stddev
        self.mean, self.stddev = mean, stddev
        self.lo = (minval - mean) / stddev
        self.hi = (maxval - mean) / stddev
        lo, hi = self.lo, self.hi
        root = np.sqrt(lo * lo + t(4))
        cutoff = t(2) * _exp(np.asarray(t(0.5) + (lo * (lo - root)) / t(4)), storage)[()] / (lo + root)
        self.diff = hi - lo
        limit = t(RANDN_STDDEVS)
        if (lo < -limit and hi >= t(0)) or (hi > limit and lo <= t(0)):
            self.method = "randn"
        elif self.diff < cutoff:
            self.method = "uniform"
            self.plus = t(0) if lo < t(0) else lo * lo
        else:
            self.method = "exponential"
            self.alpha = (lo + root) / t(2)


def _proposals(member: _Member, blocks: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray, int]:
    """(values, accepted, blocks per step) of the steps in ``blocks``: one standardized
    proposal per value, in the order TensorFlow tests them."""
    storage = dtype.storage
    t = storage.type
    if member.method == "randn":
        values = distributions.normal(dtype)(blocks.copy()).reshape(-1)
        return values, (values >= member.lo) & (values <= member.hi), 1
    if member.method == "uniform":
        steps = blocks.shape[0] // 2
        uniform = distributions.uniform(dtype)
        r = uniform(blocks[0:2 * steps:2].copy()).reshape(-1)
        u = uniform(blocks[1:2 * steps:2].copy()).reshape(-1)
        z = r * member.diff + member.lo
        g = (member.plus - z * z) / t(2)
        return z, u <= _exp(g, storage), 2
    per_block = distributions.values_per_block(dtype)
    logs = _log_uniform(blocks, dtype).reshape(-1, per_block)[:, 0::2].reshape(-1)
    u = distributions.uniform(dtype)(blocks.copy()).reshape(-1, per_block)[:, 1::2].reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        z = -logs / member.alpha + member.lo
        x = member.alpha - z if member.lo < member.alpha else np.full_like(z, member.lo - member.alpha)
        g = _exp(-x * x / t(2), storage)
    return z, (u <= g) & (z < member.hi), 1


def _rejections_exceeded(accepted: np.ndarray, upto: int, method: str) -> bool:
    """Whether TensorFlow gives up before position ``upto``: a run of MAX_REJECTIONS rejections."""
    if upto <= 0 or accepted[:upto].all():
        return False
    edges = np.flatnonzero(np.diff(np.concatenate([[True], accepted[:upto], [True]]).astype(np.int8)))
    return bool(np.max(edges[1::2] - edges[0::2]) >= MAX_REJECTIONS[method])


def _sample_member(member: _Member, stream: _Stream, count: int, dtype) -> np.ndarray:
    """``count`` samples of one member, drawn from the stream (advanced past its last block)."""
    storage = dtype.storage
    draw = max(_FIRST_DRAW, count)
    while True:
        blocks = stream.blocks(draw)
        values, accepted, step_blocks = _proposals(member, blocks, dtype)
        positions = np.flatnonzero(accepted)
        if positions.size >= count:
            last = positions[count - 1]
            if _rejections_exceeded(accepted, last + 1, member.method):
                raise ValueError(f"TruncatedNormal {member.method} rejection sampler failed to accept a sample")
            per_step = values.size // (blocks.shape[0] // step_blocks)
            stream.advance(int(last // per_step + 1) * step_blocks)
            chosen = values[positions[:count]].astype(storage)
            return chosen * member.stddev + member.mean
        if _rejections_exceeded(accepted, accepted.size, member.method):
            raise ValueError(f"TruncatedNormal {member.method} rejection sampler failed to accept a sample")
        draw *= 4


def sample(state: PhiloxState, dims: tuple[int, ...], means, stddevs, minvals, maxvals, dtype) -> np.ndarray:
    """The op's output of shape ``dims`` (ending with the parameters' broadcast shape)."""
    storage = dtype.storage
    params = np.broadcast_arrays(*(np.asarray(p, storage) for p in (means, stddevs, minvals, maxvals)))
    batch_shape = params[0].shape
    if len(dims) < len(batch_shape) or tuple(dims[len(dims) - len(batch_shape):]) != batch_shape:
        raise ValueError("Shape passed in must end with broadcasted shape.")
    num_batches = int(np.prod(batch_shape, dtype=np.int64))
    samples_per_batch = int(np.prod(dims[:len(dims) - len(batch_shape)], dtype=np.int64))
    out = np.empty((samples_per_batch, num_batches), storage)
    if not out.size:
        return out.reshape(dims)
    flat = [p.reshape(-1) for p in params]
    stream = _Stream(state)
    for b in range(num_batches):
        mean, stddev, minval, maxval = (p[b] for p in flat)
        if not (stddev > 0 and minval < maxval and (np.isfinite(minval) or np.isfinite(maxval))):
            raise ValueError("Invalid parameters")
        out[:, b] = _sample_member(_Member(mean, stddev, minval, maxval, storage), stream, samples_per_batch, dtype)
    return out.reshape(dims)
