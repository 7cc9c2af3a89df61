"""Source code of fused kernels: the loop of a group of elementwise ops, written as a Python
module that numba compiles (and gradreg.backends.numba.cache keeps on disk).

Each op's description (gradreg.backends.numba.description) gives a scalar expression
template; :class:`_Template` fills in the input names, constants of the node's float type
and the functions of the math library (:data:`LIBRARY`, gradreg.backends.numba.mathlib),
which generated modules import. Two shapes of loop:

* general (:func:`generate_source`): one loop over the flattened full values, scalar inputs
  read once before it, trailing-row inputs (a bias) indexed by the position in the row;
* static (:func:`generate_static_source`): every shape known, nested loops (one a
  dimension, the extents passed in: groups that differ only in size share a module) that
  index inputs in place, writing outputs the wrapper allocated.

The loops are serial: on the 2-core machine a ``parallel=True``/``prange`` loop measured
slower (thread hand-off, and both cores are often busy), and takes longer to compile.
"""
from __future__ import annotations

import hashlib
import math
import string
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gradreg.backends.numba.cache import load_module
from gradreg.model import dtypes
from gradreg.model.graph import Tensor

if TYPE_CHECKING:
    from gradreg.backends.numba.kernels import FusedGroup

# Template function name -> (float32 implementation, float64 implementation). Unqualified names
# are functions of gradreg.backends.numba.mathlib.
LIBRARY = {
    "exp": ("exp_f32", "np.exp"), "expm1": ("expm1_f32", "np.expm1"), "log": ("log_f32", "np.log"),
    "log1p": ("log1p_f32", "np.log1p"), "tanh": ("tanh_f32", "np.tanh"),
    "sigmoid": ("sigmoid_f32", "sigmoid_f64"), "erf": ("erf_f32", "math.erf"),
    "erfc": ("erfc_f32", "math.erfc"), "lgamma": ("lgamma_f32", "math.lgamma"),
    "where": ("where", "where"), "maximum": ("maximum", "maximum"), "minimum": ("minimum", "minimum"),
    "floormod": ("floormod", "floormod"), "sin": ("sin_f32", "np.sin"), "cos": ("cos_f32", "np.cos"),
}
# Functions whose float32 versions hold only for arguments within a bound: a loop using them
# flags any argument beyond it (or not finite) and, if one was, computes again with the
# float64 functions (GUARDED: name -> bound): sin_f32 and cos_f32 reduce by pi/2 in float32
# with fused multiply-adds, within 1 ulp of NumPy's up to 1024.
GUARDED = {"sin": 1024.0, "cos": 1024.0}

# Numba's cache does not see changes in the functions a cached kernel calls: the fingerprint
# of the math library's source goes into every generated module (and so into its file name).
MATHLIB_FINGERPRINT = hashlib.sha256(Path(__file__).with_name("mathlib.py").read_bytes()).hexdigest()[:16]


def literal(value: float, dtype: np.dtype) -> str:
    """Source for ``value`` as a scalar of ``dtype`` (exactly: repr round-trips)."""
    value = float(dtype.type(value)) if dtype.kind == "f" else float(value)
    if math.isnan(value):
        text = "np.nan"
    elif math.isinf(value):
        text = "np.inf" if value > 0 else "-np.inf"
    else:
        text = repr(value)
    return f"np.{dtype.name}({text})" if dtype.kind == "f" else text


class _Template(string.Formatter):
    """Fills a template: inputs, constants of ``dtype``, library names (recording the
    helpers used in ``helpers``); ``exact``: the float64 versions of GUARDED functions."""

    def __init__(self, dtype: np.dtype, consts: Iterable[tuple[str, float]], helpers: set[str], exact: bool = False):
        self.dtype = np.dtype(dtype)
        self.consts = dict(consts)
        self.helpers = helpers
        self.exact = exact

    def get_field(self, key, args, kwargs):
        return self.get_value(key, args, kwargs), key

    def get_value(self, key, args, kwargs):
        if key.isdigit():
            return args[int(key)]
        dtype = self.dtype
        if key.startswith("="):
            return literal(float(key[1:]), dtype)
        if key in self.consts:
            return literal(self.consts[key], dtype)
        name = LIBRARY[key][0 if dtype == np.float32 and not (self.exact and key in GUARDED) else 1]
        if "." not in name:   # a function of the math library (the others are np.* and math.*)
            self.helpers.add(name)
        return name


# How a value of a group varies over the group's elements: one value, a trailing row repeated
# over the leading dims (a bias; its own shape may have leading ones), or one value per element.
SCALAR, ROW, FULL = 0, 1, 2


def row_dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without its leading ones: (1, 1, 1, 64) -> (64,). A row input of that shape is
    the same values in the same order as one of the shape it gives."""
    start = 0
    while start < len(shape) and shape[start] == 1:
        start += 1
    return shape[start:]



def static_states(group: FusedGroup) -> dict[Tensor, int] | None:
    """Each group value's state when all shapes are static, every input is a scalar, the full
    shape or a trailing row of it (after any leading ones), and every output is full; else None."""
    full: tuple[int, ...] | None = None
    for t in (*group.inputs, *group.loop_outputs):
        shape = t.shape
        if not shape.is_fully_defined():
            return None
        if full is None or len(shape.as_tuple()) > len(full):
            full = shape.as_tuple()
    if not full or math.prod(full) == 0:
        return None
    state: dict[Tensor, int] = {}
    for t in group.inputs:
        dims = t.shape.as_tuple()
        if not dims:
            state[t] = SCALAR
        elif dims == full:
            state[t] = FULL
        elif len(dims) <= len(full) and full[len(full) - len(row := row_dims(dims)):] == row:
            state[t] = ROW
        else:
            return None
    for op, description in zip(group.ops, group.descriptions):
        states = [state[t] for t in op.inputs]
        if not description.accepts(tuple(s == SCALAR for s in states)) \
                or (ROW in states and not description.broadcasts_rows):
            return None     # the NumPy kernel decides (and may refuse) these
        state[op.outputs[0]] = max(states)
    if any(state[t] != FULL or tuple(t.shape.as_list()) != full for t in group.loop_outputs):
        return None
    return state


def guarded(group: FusedGroup, state: dict[Tensor, int]) -> bool:
    """Whether the group's loop uses a float32 GUARDED function on a non-scalar value: the loop
    then runs again with the float64 functions when an argument was out of bound, reading its
    inputs twice (so no output may be written into an input's memory)."""
    return any(np.dtype(description.dtype) == np.float32 and state[op.outputs[0]] != SCALAR
               and any("{" + name + "}" in description.expr for name in GUARDED)
               for op, description in zip(group.ops, group.descriptions))


def generate_static_source(group: FusedGroup, state: dict[Tensor, int]) -> str:
    """Python source of a module defining ``fused(lo, hi, n1, ..., *inputs, *outputs)``:
    nested loops over the full shape, the outermost from ``lo`` to ``hi`` (so that parts of it
    can run in threads), the others over the extents ``n1``... of the full shape's other
    dimensions, each row input indexed by the trailing indices (and 0 in its leading ones).
    The extents are arguments, not constants, so that the groups of a graph that differ only
    in their sizes (a network's repeated blocks) share one module: one compile, one load."""
    rank = len(group.loop_outputs[0].shape.as_tuple())
    indices = [f"i{d}" for d in range(rank)]
    names: dict[Tensor, str] = {}
    before: list[str] = []    # scalar inputs (NumPy scalars) and what only they give: computed once
    reads: list[str] = []
    params = ["lo", "hi", *(f"n{d}" for d in range(1, rank))]
    for k, t in enumerate(group.inputs):
        params.append(f"a{k}")
        names[t] = f"x{k}"
        if state[t] == SCALAR:
            before.append(f"x{k} = a{k}")
        else:
            dims = t.shape.as_tuple()
            row = row_dims(dims) if state[t] == ROW else dims
            at = ["0"] * (len(dims) - len(row)) + indices[rank - len(row):]
            reads.append(f"x{k} = a{k}[{', '.join(at)}]")
    params.extend(f"o{k}" for k in range(len(group.loop_outputs)))
    writes = [f"o{k}[{', '.join(indices)}] = NAME{k}" for k in range(len(group.loop_outputs))]
    helpers: set[str] = set()

    def nest(body: list[str], depth: int) -> list[str]:
        lines = ["    " * (depth + d) + (f"for i{d} in range(lo, hi):" if d == 0 else f"for i{d} in range(n{d}):")
                 for d in range(rank)]
        return lines + ["    " * (depth + rank) + line for line in body]
    return _guarded_loops(group, state, names, helpers, before, reads, writes, params, nest)


def generate_source(group: FusedGroup, state: dict[Tensor, int]) -> str:
    """Python source of a module defining ``fused(n, m, *inputs, *outputs)``: scalar values
    (inputs as 1-element arrays) are computed once before the loop over the ``n`` elements
    of the flattened full values; row values (``m`` elements, repeated) are indexed by the
    position within the row, with the loop split into rows when there are any."""
    names: dict[Tensor, str] = {}
    before: list[str] = []
    reads: list[str] = []
    index = {ROW: "c", FULL: "i"}
    params = ["n", "m"]
    for k, t in enumerate(group.inputs):
        params.append(f"a{k}")
        names[t] = f"x{k}"
        (before if state[t] == SCALAR else reads).append(f"x{k} = a{k}[{index.get(state[t], '0')}]")
    writes = []
    for k, t in enumerate(group.loop_outputs):
        params.append(f"o{k}")
        writes.append(f"o{k}[{index.get(state[t], '0')}] = NAME{k}")
    scalar_outputs = [state[t] == SCALAR for t in group.loop_outputs]
    helpers: set[str] = set()

    def nest(body: list[str], depth: int) -> list[str]:
        pad = "    " * depth
        if ROW in state.values():
            return [pad + "for r in range(n // m if m else 0):", pad + "    for c in range(m):",
                    pad + "        i = r * m + c"] + [pad + "        " + line for line in body]
        return [pad + "for i in range(n):"] + [pad + "    " + line for line in body or ["pass"]]
    return _guarded_loops(group, state, names, helpers, before, reads, writes, params, nest, scalar_outputs)


def _guarded_loops(group: FusedGroup, state: dict[Tensor, int], names: dict[Tensor, str], helpers: set[str],
                   before: list[str], reads: list[str], writes: list[str], params: list[str], nest: Any,
                   scalar_outputs: list[bool] | None = None) -> str:
    """The module: the statements before the loop, the loop (``nest(body, depth)``) and, if a
    float32 GUARDED function is used, a flag over its arguments and the loop again with the
    float64 functions when an argument was out of its bound."""
    fast_before, fast_loop = list(before), list(reads)
    guards: list[tuple[str, float]] = []
    _op_statements(group, state, dict(names), helpers, fast_before, fast_loop, guards=guards,
                   outputs=(writes, scalar_outputs))
    lines = ["", '@njit(cache=True, nogil=True, error_model="numpy")', f"def fused({', '.join(params)}):"]
    lines.extend("    " + line for line in fast_before)
    if guards:
        lines.append("    big = False")
        fast_loop.extend(f"big = big | (not (abs({arg}) <= {bound!r}))" for arg, bound in guards)
    lines.extend(nest(fast_loop, 1))
    if guards:
        exact_before, exact_loop = list(before), list(reads)
        _op_statements(group, state, dict(names), helpers, exact_before, exact_loop, exact=True,
                       outputs=(writes, scalar_outputs))
        lines.append("    if big:")
        lines.extend("        " + line for line in exact_before)
        lines.extend(nest(exact_loop, 2))
    return module_source("\n".join(lines) + "\n", helpers)


def _op_statements(group: FusedGroup, state: dict[Tensor, int], names: dict[Tensor, str], helpers: set[str],
                   before: list[str], loop: list[str], exact: bool = False, guards: list | None = None,
                   outputs: tuple[list[str], list[bool] | None] | None = None) -> None:
    """The statement computing each op of the group (``t{k} = ...``, named in ``names``):
    in ``before`` when its value is a scalar, else in ``loop``; then the ``outputs`` writes
    (NAME{k} replaced by the k-th output's variable). ``guards`` collects (argument, bound)
    of the float32 GUARDED functions used."""
    for k, (op, description) in enumerate(zip(group.ops, group.descriptions)):
        out = op.outputs[0]
        target = before if state[out] == SCALAR else loop
        # Before the loop (scalars, computed once) the float64 versions are cheap: no guard.
        template = _Template(description.dtype, description.consts, helpers, exact or target is before)
        args = [names[t] for t in op.inputs]
        expr = template.format(description.expr, *args)
        if out.dtype is not dtypes.bool_:
            expr = f"np.{out.known_dtype.storage.name}({expr})"   # keeps every value in its graph type
        names[out] = f"t{k}"
        target.append(f"t{k} = {expr}")
        if guards is not None and not exact and np.dtype(description.dtype) == np.float32:
            for name, bound in GUARDED.items():
                if "{" + name + "}" in description.expr:
                    guards.extend((arg, bound) for arg in args if target is loop)
    if outputs is not None:
        writes, scalar_outputs = outputs
        for k, (t, write) in enumerate(zip(group.loop_outputs, writes)):
            line = write.replace(f"NAME{k}", names[t])
            (before if scalar_outputs is not None and scalar_outputs[k] else loop).append(line)


def module_source(body: str, helpers: Iterable[str]) -> str:
    """A generated module: imports (the math library functions ``helpers``), then ``body``."""
    lines = ['"""Numba code generated by gradreg.backends.numba."""',
             f"# math library {MATHLIB_FINGERPRINT}", "import math", "", "import numpy as np",
             "from numba import njit", ""]
    names = sorted(set(helpers))
    if names:
        lines.append(f"from gradreg.backends.numba.mathlib import {', '.join(names)}")
    return "\n".join(lines) + "\n" + body


def compile_module(template: str, dtype: Any = np.float64) -> Any:
    """The module of hand-written numba code ``template`` (source after the imports; ``{exp}``
    and the other :data:`LIBRARY` names become their ``dtype`` versions, ``{=c}`` constants
    of ``dtype``), through the disk cache like the fused kernels. Functions in it should
    be ``njit(cache=True)``."""
    helpers: set[str] = set()
    body = _Template(dtype, (), helpers).format(template)
    return load_module(module_source(body, helpers))
