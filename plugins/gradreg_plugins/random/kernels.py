"""NumPy kernels of the random ops: TensorFlow's CPU outputs bit for bit (see philox.py,
distributions.py, libm.py). Errors carry TensorFlow's messages and are raised where
TensorFlow raises them: seed, key and counter checks before an empty output returns,
minval/maxval and algorithm checks after."""
from __future__ import annotations

import numpy as np

from gradreg.errors import ExecutionError, describe_node
from gradreg.model import dtypes
from gradreg_plugins.random import distributions, family, gamma, philox, truncated
from gradreg_plugins.random.ops import COUNTER_SIZE, KEY_SIZE

kernel = family.kernel

PHILOX = 1          # TensorFlow's RNG_ALG_PHILOX; AUTO_SELECT (3) means Philox on CPU
AUTO_SELECT = 3
# Blocks a stateful op reserves per output value, whatever the distribution (TensorFlow's
# GuardedPhiloxRandom::ReserveRandomOutputs(n, 256)): runs never share blocks.
RESERVED_BLOCKS_PER_OUTPUT = 256

_FLOAT_SAMPLERS = {"uniform": distributions.uniform, "normal": distributions.normal}


def _output_dims(shape, op, ctx) -> tuple[int, ...]:
    if np.ndim(shape) != 1:
        raise ValueError(f"shape must be a vector of {{int32,int64}}, got shape {list(np.shape(shape))}")
    return ctx.check_shape(shape, op)


def _size(dims: tuple[int, ...]) -> int:
    return int(np.prod(dims, dtype=np.int64))


def _seed_state(seed) -> philox.PhiloxState:
    """The Philox state of a v1 stateless op's seed input (int32 or int64 [2])."""
    seed = np.asarray(seed)
    if seed.shape != (2,):
        raise ValueError(f"seed must have shape [2], not {list(seed.shape)}")
    if seed.dtype.kind != "i":
        raise ValueError(f"Invalid seed type: {seed.dtype.name}")
    return philox.from_seed_pair(int(seed[0]), int(seed[1]))


def _key_counter(key, counter, alg) -> tuple[philox.PhiloxState, int]:
    """The Philox state and algorithm id of a V2 op's key, counter and alg inputs."""
    if np.ndim(alg) != 0:
        raise ValueError(f"input 3 (0-based) must have shape [], not {list(np.shape(alg))}")
    key, counter = np.asarray(key), np.asarray(counter)
    if key.shape != (KEY_SIZE,):
        raise ValueError(f"key must have shape [{KEY_SIZE}], not {list(key.shape)}")
    # TensorFlow accepts a counter of one element and reads past its end; gradreg refuses it.
    if counter.ndim != 1 or counter.size < COUNTER_SIZE:
        raise ValueError(f"counter must be a vector with length at least {COUNTER_SIZE}; "
                         f"got shape: {list(counter.shape)}")
    alg_id = int(alg)
    return philox.from_key_counter(key, counter), PHILOX if alg_id == AUTO_SELECT else alg_id


def _check_alg(alg_id: int) -> None:
    if alg_id != PHILOX:
        raise ValueError(f"Unsupported algorithm id: {alg_id}")


def _sample_float(kind: str, state: philox.PhiloxState, size: int, dtype) -> np.ndarray:
    if kind == "truncated":
        return distributions.truncated_normal(state, size, dtype)
    return distributions.fill(state, size, dtype, _FLOAT_SAMPLERS[kind](dtype))


def _int_bounds(minval, maxval) -> tuple[int, int]:
    for value, name in ((minval, "minval"), (maxval, "maxval")):
        if np.ndim(value) != 0:
            raise ValueError(f"{name} must be 0-D, got shape {list(np.shape(value))}")
    low, high = int(minval), int(maxval)
    if low >= high:
        raise ValueError(f"Need minval < maxval, got {low} >= {high}")
    return low, high


def _empty(dims, dtype) -> np.ndarray:
    return np.zeros(dims, dtype.storage)


def _no_kernel(op, dtype, supported: str) -> ExecutionError:
    return ExecutionError(f"{describe_node(op.name, op.type)}: TensorFlow has no CPU kernel for "
                          f"{op.type} with dtype {dtype.name} (only {supported})", op.name, op.type)


# -- stateless v1: a seed pair ---------------------------------------------------------------

def _stateless_float(op_type: str, kind: str) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        dtype = op.get_attr("dtype")

        def compute(shape, seed):
            dims = _output_dims(shape, op, ctx)
            state = _seed_state(seed)
            size = _size(dims)
            return _sample_float(kind, state, size, dtype).reshape(dims) if size else _empty(dims, dtype)
        return compute


_stateless_float("StatelessRandomUniform", "uniform")
_stateless_float("StatelessRandomNormal", "normal")
_stateless_float("StatelessTruncatedNormal", "truncated")


@kernel("StatelessRandomUniformInt")
def _stateless_uniform_int(op, ctx):
    dtype = op.get_attr("dtype")

    def compute(shape, seed, minval, maxval):
        dims = _output_dims(shape, op, ctx)
        state = _seed_state(seed)
        if not _size(dims):
            return _empty(dims, dtype)
        convert = distributions.uniform_int(dtype, *_int_bounds(minval, maxval))
        return distributions.fill(state, _size(dims), dtype, convert).reshape(dims)
    return compute


@kernel("StatelessRandomUniformFullInt")
def _stateless_full_int(op, ctx):
    dtype = op.get_attr("dtype")

    def compute(shape, seed):
        dims = _output_dims(shape, op, ctx)
        state = _seed_state(seed)
        return distributions.fill(state, _size(dims), dtype, distributions.full_int(dtype)).reshape(dims)
    return compute


_MULTINOMIAL_TYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


@kernel("StatelessMultinomial")
def _stateless_multinomial(op, ctx):
    if op.get_attr("T") not in _MULTINOMIAL_TYPES:
        raise _no_kernel(op, op.get_attr("T"), "float16, bfloat16, float32 and float64")
    out_type = op.get_attr("output_dtype").storage

    def compute(logits, num_samples, seed):
        state = _seed_state(seed)
        logits = np.asarray(logits)
        if logits.ndim != 2:
            raise ValueError(f"logits should be a matrix, got shape {list(logits.shape)}")
        if np.ndim(num_samples) != 0:
            raise ValueError(f"num_samples should be a scalar, got shape {list(np.shape(num_samples))}")
        samples = int(num_samples)
        if samples < 0:
            raise ValueError(f"num_samples should be non-negative, got {samples}")
        if logits.shape[1] == 0:
            raise ValueError("num_classes should be positive, got 0")
        ctx.check_elements(logits.shape[0] * samples, op)
        return distributions.multinomial(state, logits, samples).astype(out_type, copy=False)
    return compute


# -- stateless V2: key, counter, algorithm ---------------------------------------------------

@kernel("StatelessRandomGetKeyCounter")
def _get_key_counter(op, ctx):
    return lambda seed: _seed_state(seed).key_counter_arrays()


@kernel("StatelessRandomGetKeyCounterAlg")
def _get_key_counter_alg(op, ctx):
    return lambda seed: (*_seed_state(seed).key_counter_arrays(), np.array(PHILOX, np.int32))


@kernel("StatelessRandomGetAlg")
def _get_alg(op, ctx):
    return lambda: np.array(PHILOX, np.int32)


def _stateless_float_v2(op_type: str, kind: str) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        dtype = op.get_attr("dtype")

        def compute(shape, key, counter, alg):
            state, alg_id = _key_counter(key, counter, alg)
            dims = _output_dims(shape, op, ctx)
            if not _size(dims):
                return _empty(dims, dtype)
            _check_alg(alg_id)
            return _sample_float(kind, state, _size(dims), dtype).reshape(dims)
        return compute


_stateless_float_v2("StatelessRandomUniformV2", "uniform")
_stateless_float_v2("StatelessRandomNormalV2", "normal")
_stateless_float_v2("StatelessTruncatedNormalV2", "truncated")




@kernel("StatelessRandomUniformIntV2")
def _stateless_uniform_int_v2(op, ctx):
    dtype = op.get_attr("dtype")
    if dtype not in (dtypes.int32, dtypes.int64):
        raise _no_kernel(op, dtype, "int32 and int64")

    def compute(shape, key, counter, alg, minval, maxval):
        state, alg_id = _key_counter(key, counter, alg)
        dims = _output_dims(shape, op, ctx)
        if not _size(dims):
            return _empty(dims, dtype)
        convert = distributions.uniform_int(dtype, *_int_bounds(minval, maxval))
        _check_alg(alg_id)
        return distributions.fill(state, _size(dims), dtype, convert).reshape(dims)
    return compute


@kernel("StatelessRandomUniformFullIntV2")
def _stateless_full_int_v2(op, ctx):
    dtype = op.get_attr("dtype")

    def compute(shape, key, counter, alg):
        state, alg_id = _key_counter(key, counter, alg)
        dims = _output_dims(shape, op, ctx)
        if not _size(dims):
            return _empty(dims, dtype)
        _check_alg(alg_id)
        return distributions.fill(state, _size(dims), dtype, distributions.full_int(dtype)).reshape(dims)
    return compute


# -- stateful: a generator per node and session ----------------------------------------------

class PhiloxStream:
    """A stateful op's generator (TensorFlow's GuardedPhiloxRandom): seeded once from the
    node's (seed, seed2) attrs — from fresh entropy when both are 0 — and advanced by
    RESERVED_BLOCKS_PER_OUTPUT blocks per output value on every run."""

    def __init__(self, seed: int, seed2: int):
        if seed == 0 and seed2 == 0:
            words = np.random.SeedSequence().generate_state(2, np.uint64)
            seed, seed2 = int(words[0]), int(words[1])
        self.state = philox.from_seeds(seed, seed2)

    def reserve(self, outputs: int) -> philox.PhiloxState:
        """The state to draw ``outputs`` values from; the stream moves past them."""
        start = self.state
        self.state = start.skip(outputs * RESERVED_BLOCKS_PER_OUTPUT)
        return start


def stream(op, ctx) -> PhiloxStream:
    """The node's generator in this session, created on first use (shared by every plan the
    session compiles, as TensorFlow shares a stateful kernel across a session's runs)."""
    streams = ctx.resources.setdefault("philox_streams", {})
    key = (id(op.graph), op.name)
    found = streams.get(key)
    if found is None:
        found = streams[key] = PhiloxStream(op.get_attr("seed"), op.get_attr("seed2"))
    return found


def _stateful_float(op_type: str, kind: str) -> None:
    @kernel(op_type)
    def factory(op, ctx):
        dtype = op.get_attr("dtype")
        generator = stream(op, ctx)

        def compute(shape):
            dims = _output_dims(shape, op, ctx)
            size = _size(dims)
            state = generator.reserve(size)
            return _sample_float(kind, state, size, dtype).reshape(dims) if size else _empty(dims, dtype)
        return compute


_stateful_float("RandomUniform", "uniform")
_stateful_float("RandomStandardNormal", "normal")
_stateful_float("TruncatedNormal", "truncated")


@kernel("RandomUniformInt")
def _random_uniform_int(op, ctx):
    dtype = op.get_attr("Tout")
    generator = stream(op, ctx)

    def compute(shape, minval, maxval):
        dims = _output_dims(shape, op, ctx)
        if not _size(dims):
            return _empty(dims, dtype)
        convert = distributions.uniform_int(dtype, *_int_bounds(minval, maxval))
        return distributions.fill(generator.reserve(_size(dims)), _size(dims), dtype, convert).reshape(dims)
    return compute


# -- gamma samples ---------------------------------------------------------------------------

def _gamma_output(state: philox.PhiloxState, alpha: np.ndarray, dims: tuple[int, ...], dtype) -> np.ndarray:
    """Samples of output shape ``dims`` (ending with alpha's shape), sample-major."""
    if not alpha.size:
        raise ValueError(f"Input alpha should have non-zero element count, got: {alpha.size}")
    per_alpha = _size(dims) // alpha.size
    values = gamma.samples(state, alpha, per_alpha)
    return gamma.to_output_type(values, dtype).reshape(dims)


def _ends_with(dims: tuple[int, ...], alpha: np.ndarray) -> None:
    if len(dims) < alpha.ndim or tuple(dims[len(dims) - alpha.ndim:]) != alpha.shape:
        raise ValueError("Shape passed in must end with broadcasted shape.")


@kernel("RandomGamma")
def _random_gamma(op, ctx):
    dtype = op.get_attr("T")
    generator = stream(op, ctx)

    def compute(shape, alpha):
        dims = _output_dims(shape, op, ctx) + tuple(np.shape(alpha))
        ctx.check_shape(dims, op)
        if not _size(dims):
            return _empty(dims, dtype)
        return _gamma_output(generator.reserve(_size(dims)), alpha, dims, dtype)
    return compute


@kernel("StatelessRandomGammaV2")
def _stateless_random_gamma_v2(op, ctx):
    dtype = op.get_attr("dtype")

    def compute(shape, seed, alpha):
        dims = _output_dims(shape, op, ctx)
        state = _seed_state(seed)
        if not _size(dims):
            return _empty(dims, dtype)
        _ends_with(dims, alpha)
        return _gamma_output(state, alpha, dims, dtype)
    return compute


@kernel("StatelessRandomGammaV3")
def _stateless_random_gamma_v3(op, ctx):
    dtype = op.get_attr("dtype")

    def compute(shape, key, counter, alg, alpha):
        dims = _output_dims(shape, op, ctx)
        state, alg_id = _key_counter(key, counter, alg)
        if not _size(dims):
            return _empty(dims, dtype)
        _check_alg(alg_id)
        _ends_with(dims, alpha)
        return _gamma_output(state, alpha, dims, dtype)
    return compute


# -- parameterized truncated normal samples ----------------------------------------------------

@kernel("StatelessParameterizedTruncatedNormal")
def _stateless_parameterized_truncated_normal(op, ctx):
    dtype = op.get_attr("dtype")

    def compute(shape, seed, means, stddevs, minvals, maxvals):
        dims = _output_dims(shape, op, ctx)
        state = _seed_state(seed)
        return truncated.sample(state, dims, means, stddevs, minvals, maxvals, dtype)
    return compute
