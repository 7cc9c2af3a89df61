"""What the plugin checker found: per op type, the checks that passed, the failures (each naming
the op type, the dtype, the input and the largest error) and the checks it could not run, with why."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gradreg.model.dtypes import DType

# How close a value computed in a dtype must be to the reference: the largest difference,
# relative to max(1, the largest reference value). Kernels of one dtype against each other
# (numba, TensorFlow, onnxruntime) and a narrower dtype against float64 (a few roundings).
TOLERANCES = {"float64": 1e-9, "complex128": 1e-9, "float32": 1e-5, "complex64": 1e-5, "float16": 1e-2,
              "bfloat16": 5e-2}


def tolerance(dtype: DType | None) -> float:
    """The tolerance of values of ``dtype`` (integers and others: exact)."""
    return 0.0 if dtype is None else TOLERANCES.get(dtype.base_dtype.name, 0.0)


@dataclass(frozen=True)
class Failure:
    """One check that failed: ``str(failure)`` is its one-line summary."""
    op_type: str
    dtype: str
    check: str
    message: str
    error: float | None = None
    case: str = ""
    plugin: str = ""

    def __str__(self) -> str:
        where = f"{self.op_type} {self.dtype}".rstrip()
        case = f" [{self.case}]" if self.case else ""
        return f"{where}{case}: {self.check}: {self.message}"


@dataclass
class OpReport:
    """The checks of one op type a plugin provides something for."""
    plugin: str
    op_type: str
    provides: tuple[str, ...] = ()
    passed: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, dtype: DType | None, check: str, message: str, error: float | None = None,
             case: str = "") -> None:
        self.failures.append(Failure(self.op_type, dtype.name if dtype is not None else "", check, message,
                                     error, case, self.plugin))

    def passes(self, dtype: DType | None, check: str) -> None:
        self.passed.append(f"{dtype.name} {check}" if dtype is not None else check)

    def skip(self, dtype: DType | None, check: str, why: str) -> None:
        self.skipped.append(f"{dtype.name + ' ' if dtype is not None else ''}{check}: {why}")

    def describe(self) -> str:
        """The report as text: one line per failure, then what was not checked."""
        head = f"{self.plugin}: {self.op_type} ({', '.join(self.provides)}): " \
               f"{len(self.passed)} checks passed, {len(self.failures)} failed"
        lines = [head, *(f"  FAILED {f}" for f in self.failures), *(f"  not checked: {s}" for s in self.skipped)]
        return "\n".join(lines)


@dataclass
class PluginReport:
    """The checks of every op type a package's plugins provide something for."""
    package: str
    plugins: list[str]
    ops: list[OpReport] = field(default_factory=list)

    @property
    def failures(self) -> list[Failure]:
        return [f for op in self.ops for f in op.failures]

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        passed = sum(len(op.passed) for op in self.ops)
        return (f"{self.package} (plugins {', '.join(self.plugins)}): {len(self.ops)} op types, {passed} checks "
                f"passed, {len(self.failures)} failed")


def largest_error(actual: np.ndarray, expected: np.ndarray) -> tuple[float, float, int]:
    """(the largest |actual - expected|, that relative to max(1, max |expected|), the flat index
    where it is); a NaN or an infinity where the other side has none counts as an infinite error."""
    a = np.asarray(actual, np.complex128 if np.iscomplexobj(actual) or np.iscomplexobj(expected) else np.float64)
    e = np.asarray(expected, a.dtype)
    if a.shape != e.shape:
        return float("inf"), float("inf"), 0
    if a.size == 0:
        return 0.0, 0.0, 0
    with np.errstate(invalid="ignore", over="ignore"):   # inf - inf: NaN, counted below
        difference = np.abs(a - e)
    same_special = (np.isnan(a) & np.isnan(e)) | (np.isinf(a) & (a == e))
    difference = np.where(same_special, 0.0, np.where(np.isfinite(difference), difference, np.inf))
    index = int(np.argmax(difference))
    scale = max(1.0, float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)))
    return float(difference.flat[index]), float(difference.flat[index]) / scale, index


def element(shape: tuple[int, ...], flat_index: int) -> str:
    """A flat index as ``[i, j]`` in ``shape`` (``[]`` for a scalar)."""
    if not shape:
        return "[]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat_index, shape)) + "]"

