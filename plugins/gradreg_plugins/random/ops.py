"""Random op definitions and shape functions. Signatures are TensorFlow's (op_def_registry).

Stateless ops take their randomness from inputs — a seed pair (v1) or a Philox key, counter
and algorithm (V2, whose key and counter StatelessRandomGetKeyCounter derives from a seed)
— and so give equal outputs for equal inputs. The stateful ops (RandomUniform, ...) carry a
(seed, seed2) attr pair and a generator that advances on every run of a session."""
from __future__ import annotations

from gradreg.model import shape_fns as sf
from gradreg.model.shapes import SCALAR, TensorShape
from gradreg_plugins.random import family

op = family.op

_FLOAT_DTYPE = "dtype: {float16, bfloat16, float32, float64} = float32"
_TSHAPE = "Tshape: {int32, int64} = int32"
_TSEED = "Tseed: {int32, int64} = int64"
_KEY_COUNTER_ALG = ["key: uint64", "counter: uint64", "alg: int32"]
KEY_SIZE = 1          # uint64 words of a Philox key
COUNTER_SIZE = 2      # uint64 words of a Philox counter


def _vector_of(ctx, index: int, name: str, length: int | None = None, at_least: bool = False) -> None:
    shape = ctx.input_shape(index)
    if shape.rank is None:
        return
    if shape.rank != 1:
        raise ctx.error(f"{name} must be a vector, got shape {shape}")
    size = shape.dims[0]
    if length is not None and size is not None and (size < length if at_least else size != length):
        raise ctx.error(f"{name} must have shape [{length}{' or more' if at_least else ''}], got {shape}")


def _scalars(ctx, first: int, names: tuple[str, ...]) -> None:
    for i, name in enumerate(names, start=first):
        if ctx.input_shape(i).rank not in (None, 0):
            raise ctx.error(f"{name} must be a scalar, got shape {ctx.input_shape(i)}")


def _output_from_shape_input(ctx) -> TensorShape:
    _vector_of(ctx, 0, "shape")
    return ctx.input_as_shape(0)


def _seeded_shape(ctx) -> TensorShape:
    """v1 stateless ops: a seed vector [2]; the output shape is input 0's value."""
    _vector_of(ctx, 1, "seed", 2)
    _scalars(ctx, 2, ("minval", "maxval")[:ctx.num_inputs - 2])
    return _output_from_shape_input(ctx)


def _key_counter_shape(ctx) -> TensorShape:
    """V2 stateless ops: key [1], counter [>= 2], alg scalar (then minval, maxval scalars)."""
    _vector_of(ctx, 1, "key", KEY_SIZE)
    _vector_of(ctx, 2, "counter", COUNTER_SIZE, at_least=True)
    _scalars(ctx, 3, ("alg", "minval", "maxval")[:ctx.num_inputs - 3])
    return _output_from_shape_input(ctx)


def _get_key_counter_shape(ctx) -> list[TensorShape]:
    _vector_of(ctx, 0, "seed", 2)
    shapes = [TensorShape([KEY_SIZE]), TensorShape([COUNTER_SIZE]), SCALAR]
    return shapes[:ctx.num_outputs]


# -- stateless, seeded by a seed pair (v1) ----------------------------------------------------

for _name in ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal"):
    op(_name, inputs=["shape: T", "seed: Tseed"], outputs=["output: dtype"],
       attrs=[_FLOAT_DTYPE, "T: {int32, int64} = int32", _TSEED], shape=_seeded_shape)
op("StatelessRandomUniformInt", inputs=["shape: T", "seed: Tseed", "minval: dtype", "maxval: dtype"],
   outputs=["output: dtype"], attrs=["dtype: {int32, int64}", "T: {int32, int64}", _TSEED], shape=_seeded_shape)
op("StatelessRandomUniformFullInt", inputs=["shape: T", "seed: Tseed"], outputs=["output: dtype"],
   attrs=["dtype: {int32, int64, uint32, uint64} = uint64", "T: {int32, int64} = int32",
          "Tseed: {int32, int64, uint32, uint64} = int64"], shape=_seeded_shape)

def _multinomial_shape(ctx) -> TensorShape:
    logits = ctx.input_shape(0)
    if logits.rank not in (None, 2):
        raise ctx.error(f"logits should be a matrix, got shape {logits}")
    _scalars(ctx, 1, ("num_samples",))
    _vector_of(ctx, 2, "seed", 2)
    samples = ctx.input_value(1)
    batch = None if logits.rank is None else logits.dims[0]
    return TensorShape([batch, None if samples is None else int(samples)])


op("StatelessMultinomial", inputs=["logits: T", "num_samples: int32", "seed: Tseed"], outputs=["output: output_dtype"],
   attrs=["T: {float32, float64, int32, uint8, int16, int8, int64, bfloat16, uint16, float16, uint32, uint64}",
          _TSEED, "output_dtype: {int32, int64} = int64"], shape=_multinomial_shape)


# -- stateless, given a Philox key, counter and algorithm (V2) ---------------------------------

op("StatelessRandomGetKeyCounter", inputs=["seed: Tseed"], outputs=["key: uint64", "counter: uint64"],
   attrs=[_TSEED], shape=_get_key_counter_shape)
op("StatelessRandomGetKeyCounterAlg", inputs=["seed: Tseed"],
   outputs=["key: uint64", "counter: uint64", "alg: int32"], attrs=[_TSEED], shape=_get_key_counter_shape)
op("StatelessRandomGetAlg", outputs=["alg: int32"], shape=sf.scalar, stateful=True)

for _name in ("StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2"):
    op(_name, inputs=["shape: Tshape"] + _KEY_COUNTER_ALG, outputs=["output: dtype"],
       attrs=[_FLOAT_DTYPE, _TSHAPE], shape=_key_counter_shape)
op("StatelessRandomUniformIntV2", inputs=["shape: Tshape"] + _KEY_COUNTER_ALG + ["minval: dtype", "maxval: dtype"],
   outputs=["output: dtype"], attrs=["dtype: {int32, int64, uint32, uint64}", _TSHAPE], shape=_key_counter_shape)
op("StatelessRandomUniformFullIntV2", inputs=["shape: Tshape"] + _KEY_COUNTER_ALG, outputs=["output: dtype"],
   attrs=["dtype: {int32, int64, uint32, uint64} = uint64", _TSHAPE], shape=_key_counter_shape)

# -- stateful, seeded by attrs (moved here from the math family) -------------------------------


def _stateful_shape(ctx) -> TensorShape:
    _scalars(ctx, 1, ("minval", "maxval")[:ctx.num_inputs - 1])
    return _output_from_shape_input(ctx)


_SEEDS = ["seed: int = 0", "seed2: int = 0"]
for _name in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal"):
    op(_name, inputs=["shape: T"], outputs=["output: dtype"],
       attrs=_SEEDS + ["dtype: {float16, bfloat16, float32, float64}", "T: {int32, int64}"],
       shape=_stateful_shape, stateful=True)
op("RandomUniformInt", inputs=["shape: T", "minval: Tout", "maxval: Tout"], outputs=["output: Tout"],
   attrs=_SEEDS + ["Tout: {int32, int64}", "T: {int32, int64}"], shape=_stateful_shape, stateful=True)


# -- gamma samples (gamma.py), differentiable in alpha -------------------------------------------

def _random_gamma_shape(ctx) -> TensorShape:
    """RandomGamma: the shape input's value followed by alpha's shape."""
    return _output_from_shape_input(ctx).concatenate(ctx.input_shape(1))


def _ends_with_alpha(ctx, alpha_index: int) -> TensorShape:
    out = _output_from_shape_input(ctx)
    alpha = ctx.input_shape(alpha_index)
    if out.rank is not None and alpha.rank is not None and (
            alpha.rank > out.rank or not out[out.rank - alpha.rank:].is_compatible_with(alpha)):
        raise ctx.error(f"the output shape {out} must end with alpha's shape {alpha}")
    return out


def _stateless_gamma_v2_shape(ctx) -> TensorShape:
    _vector_of(ctx, 1, "seed", 2)
    return _ends_with_alpha(ctx, 2)


def _stateless_gamma_v3_shape(ctx) -> TensorShape:
    _vector_of(ctx, 1, "key", KEY_SIZE)
    _vector_of(ctx, 2, "counter", COUNTER_SIZE, at_least=True)
    _scalars(ctx, 3, ("alg",))
    return _ends_with_alpha(ctx, 4)


_GAMMA_DTYPE = "dtype: {float16, float32, float64}"
op("RandomGamma", inputs=["shape: S", "alpha: T"], outputs=["output: T"],
   attrs=_SEEDS + ["S: {int32, int64}", "T: {float16, float32, float64}"], shape=_random_gamma_shape,
   stateful=True)
op("StatelessRandomGammaV2", inputs=["shape: T", "seed: Tseed", "alpha: dtype"], outputs=["output: dtype"],
   attrs=[_GAMMA_DTYPE, "T: {int32, int64}", _TSEED], shape=_stateless_gamma_v2_shape)
op("StatelessRandomGammaV3", inputs=["shape: shape_dtype"] + _KEY_COUNTER_ALG + ["alpha: dtype"],
   outputs=["output: dtype"], attrs=[_GAMMA_DTYPE, "shape_dtype: {int32, int64} = int32"],
   shape=_stateless_gamma_v3_shape)


# -- parameterized truncated normal samples (truncated.py), differentiable in the parameters ------

def _parameterized_truncated_normal_shape(ctx) -> TensorShape:
    _vector_of(ctx, 1, "seed", 2)
    return _output_from_shape_input(ctx)


op("StatelessParameterizedTruncatedNormal",
   inputs=["shape: S", "seed: Tseed", "means: dtype", "stddevs: dtype", "minvals: dtype", "maxvals: dtype"],
   outputs=["output: dtype"], attrs=["S: {int32, int64}", _TSEED, "dtype: {float16, float32, float64}"],
   shape=_parameterized_truncated_normal_shape)
