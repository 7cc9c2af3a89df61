"""A check case (gradreg.registry.cases.Case) made concrete for the plugin checker: a graph with
one Placeholder per input (random values drawn in the case's domain, in the dtype being tried)
or a Const per fixed input, the op built from them, and the values to feed.

    trial = build_trial(case, dtypes.float64)
    outputs = Session(trial.graph).run(trial.outputs, trial.feeds())
"""
from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradreg.build.builders import apply_op, constant
from gradreg.errors import GradregError
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.graph import Graph, Operation, Tensor
from gradreg.model.opdefs import ArgSpec, OpDefinition
from gradreg.registry import get_registry
from gradreg.registry.cases import Case, is_shape

# The dtypes a case is tried in unless it names its own: those the NumPy backend computes in and
# the checker can draw values of. Finite differences use the first real float type here
# that the op allows (float64 when it does).
TRIED_DTYPES = (dtypes.float64, dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.complex128,
                dtypes.complex64, dtypes.int64, dtypes.int32)
DEFAULT_SHAPE = (2, 3)


class CaseError(GradregError):
    """A case that cannot be built or run (it names the op type and the dtype)."""


@dataclass
class Trial:
    """One case at one dtype, built (see the module docstring). ``inputs`` are the op's flat
    inputs, Placeholders or Consts; ``values`` their values; ``varied`` the indices of those
    drawn at random (the ones differentiated when they are of a float type)."""
    case: Case
    dtype: DType | None
    graph: Graph
    op: Operation
    inputs: list[Tensor]
    values: list[np.ndarray]
    varied: list[int]
    input_names: list[str]          # "x", "y[1]" (the argument's name; a list argument's item)

    @property
    def outputs(self) -> list[Tensor]:
        return list(self.op.outputs)

    def feeds(self, values: Sequence[np.ndarray] | None = None) -> dict[Tensor, np.ndarray]:
        """Placeholder -> value (``values``: other values for the varied inputs, in order)."""
        chosen = list(self.values)
        if values is not None:
            for index, value in zip(self.varied, values):
                chosen[index] = value
        return {self.inputs[i]: chosen[i] for i in self.varied}

    def float_inputs(self) -> list[int]:
        """Indices (into ``inputs``) of the varied inputs of a real float type."""
        return [i for i in self.varied if self.inputs[i].known_dtype.is_floating]

    def float_outputs(self) -> list[int]:
        return [k for k, t in enumerate(self.op.outputs) if t.dtype is not None and t.dtype.is_floating]


def case_dtypes(case: Case, definition: OpDefinition) -> list[DType | None]:
    """The dtypes ``case`` is tried in: its own list, else the types its first random input's
    argument allows among TRIED_DTYPES ([None] for a case whose inputs are all fixed)."""
    if case.dtypes is not None:
        return [dtypes.as_dtype(name) for name in case.dtypes]
    args = definition.input_args
    for arg, value in zip(args, case.inputs):
        if isinstance(value, (list, tuple)):   # a shape or a list of shapes: random values
            allowed = _allowed_types(arg, definition)
            return [d for d in TRIED_DTYPES if allowed is None or d in allowed]
    return [None]


def _allowed_types(arg: ArgSpec, definition: OpDefinition) -> tuple[DType, ...] | None:
    if arg.fixed_type is not None:
        return (arg.fixed_type.base_dtype,)
    attr = arg.type_attr or arg.type_list_attr
    spec = definition.attr_specs.get(attr) if attr else None
    return None if spec is None else spec.allowed_types


def finite_difference_dtype(candidates: Sequence[DType | None]) -> DType | None:
    """The dtype finite differences use: float64 if tried, else the widest real float tried."""
    floats = [d for d in candidates if d is not None and d.is_floating]
    return max(floats, key=lambda d: (d is dtypes.float64, d.storage.itemsize), default=None)


def default_case(definition: OpDefinition) -> Case | None:
    """A case from the definition alone (shape (2, 3) for each input) when every input is one
    tensor that may be a float and every attr but the type attrs has a default; else None."""
    inputs: list[Any] = []
    for arg in definition.input_args:
        allowed = _allowed_types(arg, definition)
        if arg.is_list or arg.is_ref or (allowed is not None and not any(d.is_floating for d in allowed)):
            return None
        inputs.append(list(DEFAULT_SHAPE))
    inferred = {a.type_attr for a in definition.input_args}
    for spec in definition.attr_specs.values():
        if not spec.has_default and spec.name not in inferred:   # an attr the builder cannot infer
            return None
    if not inputs:
        return None
    return Case(definition.name, tuple(inputs), label="the default case " + ", ".join(["[2, 3]"] * len(inputs)))


def build_trial(case: Case, dtype: DType | None, known_shapes: bool = True,
                values: Sequence[np.ndarray] | None = None) -> Trial:
    """``case`` at ``dtype`` in a new graph; ``known_shapes=False`` gives the Placeholders no
    shape (unknown rank); ``values`` replaces the random values (one per varied input).
    CaseError naming the op type and dtype if the definition is missing or the op does not build."""
    definition = get_registry().op_definition(case.op_type)
    where = f"{case.op_type} {dtype.name if dtype is not None else ''}".rstrip()
    if definition is None:
        raise CaseError(f"{where}: no installed plugin defines op type '{case.op_type}'")
    if len(case.inputs) != len(definition.input_args):
        raise CaseError(f"{where}: the case gives {len(case.inputs)} inputs; the op has {len(definition.input_args)} "
                        f"({', '.join(a.name for a in definition.input_args)})")
    rng = np.random.default_rng(zlib.crc32(f"{case.op_type}/{case.describe()}".encode()))
    graph = Graph()
    tensors: list[Tensor] = []
    drawn: list[np.ndarray] = []
    varied: list[int] = []
    names: list[str] = []
    args: list[Any] = []
    with graph.as_default():
        for index, (arg, given) in enumerate(zip(definition.input_args, case.inputs)):
            if hasattr(given, "dtype"):          # a fixed value
                fixed = constant(np.asarray(given), name=arg.name)
                args.append(fixed)
                tensors.append(fixed)
                drawn.append(np.asarray(given))
                names.append(arg.name)
                continue
            shapes = [given] if is_shape(given) else list(given)
            made = []
            for item, shape in enumerate(shapes):
                arg_dtype = _input_dtype(arg, dtype, where)
                value = draw(rng, arg_dtype, tuple(shape), case.domain_of(index))
                label = arg.name if is_shape(given) else f"{arg.name}[{item}]"
                placeholder = apply_op("Placeholder", dtype=arg_dtype, shape=list(shape) if known_shapes else None,
                                       name=label.replace("[", "_").replace("]", ""))
                varied.append(len(tensors))
                tensors.append(placeholder)
                drawn.append(value)
                names.append(label)
                made.append(placeholder)
            args.append(made[0] if is_shape(given) else made)
        try:
            result = apply_op(case.op_type, *args, **dict(case.attrs))
        except GradregError as exc:
            raise CaseError(f"{where}: the op does not build from the case ({case.describe()}): {exc}") from None
    op = result.op if isinstance(result, Tensor) else (result if isinstance(result, Operation) else
                                                      _op_of(result, where))
    trial = Trial(case, dtype, graph, op, tensors, drawn, varied, names)
    if values is not None:
        for i, value in zip(varied, values):
            trial.values[i] = value
    return trial


def _op_of(result: Any, where: str) -> Operation:
    for item in result:
        if isinstance(item, Tensor):
            return item.op
        if isinstance(item, (list, tuple)) and item:
            return _op_of(item, where)
    raise CaseError(f"{where}: the op built no outputs")


def _input_dtype(arg: ArgSpec, dtype: DType | None, where: str) -> DType:
    if arg.fixed_type is not None:
        return arg.fixed_type.base_dtype
    if dtype is None:
        raise CaseError(f"{where}: input '{arg.name}' has random values but the case tries no dtype")
    return dtype


def draw(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...], domain: tuple[float, float]) -> np.ndarray:
    """Values uniform in ``domain`` of ``dtype`` (rounded to it; integers away from zero, bools by halves)."""
    low, high = domain
    real = rng.uniform(low, high, size=shape)
    if dtype.is_complex:
        return (real + 1j * rng.uniform(low, high, size=shape)).astype(dtype.storage)
    if dtype.is_integer:   # rounded away from zero (no integer division by zero in the default domain)
        return (np.sign(real) * np.ceil(np.abs(real))).astype(dtype.storage)
    if dtype is dtypes.bool_:
        return real > (low + high) / 2
    return round_to(real, dtype)


def round_to(values: np.ndarray, dtype: DType) -> np.ndarray:
    """``values`` rounded to ``dtype`` and held in its storage type (bfloat16: float32 arrays
    holding bfloat16 values, rounded to nearest even)."""
    if dtype is not dtypes.bfloat16:
        return np.asarray(values).astype(dtype.storage)
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32)
