"""The case table of the op sweep (used by make_reference.py and the cases_*.py modules; needs
TensorFlow). A case is one small graph around one op type:

    case("Sin", "f32", lambda x: R.Sin(x=x), x=inp(values("any", (3, 4)), f32))

``build(**placeholders)`` returns the output tensor(s); every float or complex output is a y
(the sweep differentiates ``sum(y * cotangent)``). Each keyword input becomes a placeholder,
differentiated unless ``diff=False``; structural arguments (axes, shapes, indices) are
constants inside ``build`` as they are in real graphs.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

R = tf.raw_ops
f16, f32, f64 = tf.float16, tf.float32, tf.float64
c64, c128 = tf.complex64, tf.complex128
i32, i64, boolean = tf.int32, tf.int64, tf.bool


@dataclass
class Input:
    value: np.ndarray
    dtype: Any
    shape: Any = "value"          # "value": the value's shape; a list with None for unknown dims
    diff: bool | None = None      # None: differentiate float and complex inputs

    @property
    def static_shape(self):
        return list(self.value.shape) if self.shape == "value" else self.shape

    @property
    def differentiable(self) -> bool:
        if self.diff is not None:
            return self.diff
        return self.dtype.is_floating or self.dtype.is_complex


@dataclass
class Case:
    op: str               # the op type under test
    variant: str
    family: str
    build: Callable
    inputs: dict[str, Input]
    random: bool = False  # the op's outputs are random: the test feeds TensorFlow's sample
    note: str = ""
    covers: tuple = ()     # further op types the case exercises (v1 loops: Enter, Exit, Merge, ...)
    ys: Callable | None = None   # pick the differentiated outputs from build's result
    # Where TensorFlow cannot differentiate the op (or run it: ``tf_runs=False``, no CPU kernel),
    # ``twin`` builds the same function from ops it can (same placeholders, same outputs): its
    # gradients (and, without a kernel, its values) are the reference; see README.md.
    twin: Callable | None = None
    tf_runs: bool = True

    @property
    def id(self) -> str:
        return f"{self.op}.{self.variant}"


CASES: list[Case] = []
_FAMILY = ["misc"]
# The GraphDef producer version a family's graphs are built at, where not TensorFlow's own: ops
# TensorFlow removed from GraphDefs (TensorArray v1 at 16, V2 at 26) build only below it.
PRODUCERS = {"legacy": 15}


def family(name: str) -> None:
    """Cases declared after this call belong to op family ``name`` (one set of files per family)."""
    _FAMILY[0] = name


def case(op: str, variant: str, build: Callable, **inputs: Input) -> Case:
    options = {k: inputs.pop(k) for k in ("random", "note", "ys", "covers", "twin", "tf_runs") if k in inputs}
    c = Case(op, variant, _FAMILY[0], build, inputs, **options)
    if any(existing.id == c.id for existing in CASES):
        raise ValueError(f"duplicate case {c.id}")
    CASES.append(c)
    return c


def inp(value, dtype=f32, shape="value", diff=None) -> Input:
    array = np.asarray(value)
    if dtype.is_complex and not np.iscomplexobj(array):
        array = array + 0.5j * np.roll(array, 1)
    return Input(array.astype(dtype.as_numpy_dtype), dtype, shape, diff)


# -- values ----------------------------------------------------------------------------------------

def rng(*key) -> np.random.Generator:
    """A generator seeded from ``key`` (stable across runs and Python versions)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


DOMAINS = {   # (low, high) of uniform values; "any" keeps away from 0 where kinks live
    "any": (-2.0, 2.0), "pos": (0.5, 3.0), "unit": (-0.9, 0.9), "ge1": (1.2, 3.0), "small": (-1.0, 1.0),
    "prob": (0.1, 0.9), "gtm1": (-0.8, 2.0), "wide": (-4.0, 4.0), "big": (2.5, 6.0), "half": (0.05, 0.95),
}


def values(domain: str, shape, key: Any = None, avoid_zero: bool = True) -> np.ndarray:
    """Uniform values in ``domain``, away from 0 (and from integers' kinks for "any")."""
    low, high = DOMAINS[domain]
    v = rng(domain, tuple(shape), key).uniform(low, high, shape)
    if avoid_zero and low < 0 < high:
        v = np.where(np.abs(v) < 0.1, v + np.sign(v + 1e-9) * 0.2, v)
    return v


def distinct(shape, key: Any = None, scale: float = 1.0) -> np.ndarray:
    """Values with no ties (max/min/sort/top_k have unique answers): a permutation of a grid."""
    n = int(np.prod(shape))
    grid = (np.arange(n) - n / 2.0 + 0.25) * (4.0 * scale / max(n, 1))
    return rng("distinct", tuple(shape), key).permutation(grid).reshape(shape)


def spd(n: int, batch=(), key: Any = None) -> np.ndarray:
    """Symmetric positive definite matrices, well conditioned."""
    a = rng("spd", n, batch, key).normal(size=tuple(batch) + (n, n))
    return a @ np.swapaxes(a, -1, -2) / n + np.eye(n)


def well_conditioned(n: int, batch=(), key: Any = None) -> np.ndarray:
    a = rng("wc", n, batch, key).normal(size=tuple(batch) + (n, n)) * 0.3
    return a + 2.0 * np.eye(n)


FLOAT_TYPES = (f32, f64)


def short(dtype) -> str:
    return {f16: "f16", f32: "f32", f64: "f64", c64: "c64", c128: "c128"}.get(dtype, dtype.name)


# -- generators for common op shapes -----------------------------------------------------------------

def unary(op: str, domain: str = "any", complex_types=(), unknown: bool = True, shape=(3, 4), fn=None,
          types=FLOAT_TYPES, **extra):
    """Cases ``f32``, ``f64``, ``f64_unknown`` ([None, k] placeholder) and one per complex type."""
    fn = fn or (lambda x: getattr(R, op)(x=x))
    for dt in tuple(types) + tuple(complex_types):
        case(op, short(dt), fn, x=inp(values(domain, shape, op), dt), **extra)
    if unknown:
        case(op, "f64_unknown", fn, x=inp(values(domain, shape, op), f64, [None, shape[-1]]), **extra)


def binary(op: str, x_domain: str = "any", y_domain: str = "any", complex_types=(), fn=None,
           types=FLOAT_TYPES, broadcast: bool = True, unknown: bool = True):
    """Same-shape cases per dtype; broadcasting ([3,4] with [4], [3,1] with [1,4], scalar y);
    an unknown-dimension variant."""
    fn = fn or (lambda x, y: getattr(R, op)(x=x, y=y))
    for dt in tuple(types) + tuple(complex_types):
        case(op, short(dt), fn, x=inp(values(x_domain, (3, 4), op), dt), y=inp(values(y_domain, (3, 4), op + "y"), dt))
    if broadcast:
        case(op, "f64_bcast_row", fn, x=inp(values(x_domain, (3, 4), op), f64), y=inp(values(y_domain, (4,), op), f64))
        case(op, "f64_bcast_both", fn, x=inp(values(x_domain, (3, 1), op), f64),
             y=inp(values(y_domain, (1, 4), op), f64))
        case(op, "f32_scalar_y", fn, x=inp(values(x_domain, (2, 3), op), f32), y=inp(values(y_domain, (), op), f32))
        case(op, "f64_scalar_x", fn, x=inp(values(x_domain, (), op), f64), y=inp(values(y_domain, (2, 3), op), f64))
    if unknown and broadcast:
        case(op, "f64_unknown", fn, x=inp(values(x_domain, (3, 4), op), f64, [None, 4]),
             y=inp(values(y_domain, (4,), op), f64, [None]))
    elif unknown:
        case(op, "f64_unknown", fn, x=inp(values(x_domain, (3, 4), op), f64, [None, 4]),
             y=inp(values(y_domain, (3, 4), op + "y"), f64, [None, 4]))
