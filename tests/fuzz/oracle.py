"""The oracle: what gradreg may do with a mutant, in-process and through the command line.

Allowed: a value equal to a reference evaluation (the other backend always; the unmutated seed
when the mutation keeps the meaning), or a GradregError whose message is one line naming the
file, a node or a tensor. Everything else is a finding:

``internal``   an exception that is not a GradregError (a bug surfacing as KeyError, RecursionError...)
``multiline``  a GradregError message over several lines
``unlocated``  a GradregError naming no file, node, function or tensor
``unwritable`` a graph that loads but cannot be written back and loaded again
``disagree``   the backends disagree: different values, or one fails where the other succeeds
``wrong``      a value differing from the unmutated seed's, for a mutation that keeps the meaning,
               or a result where the input can never be good
``timeout``    longer than the time limit (a hang)
``crash``      the process died (a signal, an exit status other than 0, 1)
``escape``     a model job touched what lies outside its model: a file outside changed or appeared, the
               working directory got a file, a value from outside came back (tests/fuzz/models.py)
"""
from __future__ import annotations

import os
import re
import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gradreg as gr
from gradreg.autodiff.gradients import as_dense_gradients
from gradreg.errors import GradregError

FAILURES = ("internal", "multiline", "unlocated", "unwritable", "disagree", "wrong", "timeout", "crash", "escape")


class FuzzTimeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` in gradreg swallows it."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise FuzzTimeout(f"more than {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Verdict:
    """What happened to one mutant: ``kind`` is "ok", "error" (a clean one) or a failure."""
    kind: str = "ok"
    stage: str = ""
    detail: str = ""
    stages: list[tuple[str, str]] = field(default_factory=list)   # (stage, "ok"/"error"/failure)

    def note(self, stage: str, kind: str, detail: str = "") -> None:
        self.stages.append((stage, kind))
        if kind in FAILURES and self.kind not in FAILURES:
            self.kind, self.stage, self.detail = kind, stage, detail
        elif kind == "error" and self.kind == "ok" and stage == "load":
            self.kind, self.stage, self.detail = "error", stage, detail

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


_QUOTED = re.compile(r"'([^']*)'")


def classify_error(exc: BaseException, where: list[str]) -> tuple[str, str]:
    """("error", message) for a clean GradregError, else the failure kind and a description.
    ``where``: strings any of which the message may name (the file, node and tensor names)."""
    if isinstance(exc, FuzzTimeout):
        return "timeout", str(exc)
    text = str(exc)
    if not isinstance(exc, GradregError):
        frames = traceback.extract_tb(exc.__traceback__)
        place = next((f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames)
                      if "gradreg" in f.filename), "?")
        return "internal", f"{type(exc).__name__}: {text[:300]} [at {place}]"
    if "\n" in text.strip() or "Traceback" in text:
        return "multiline", text[:500]
    if not names_a_place(text, where):
        return "unlocated", f"{type(exc).__name__}: {text[:300]}"
    return "error", f"{type(exc).__name__}: {text[:300]}"


def names_a_place(text: str, where: list[str]) -> bool:
    """Whether an error message names the file, or quotes a node, function or tensor name."""
    if any(w and w in text for w in where[:1]):
        return True
    known = set(where)
    for quoted in _QUOTED.findall(text):
        base = quoted.lstrip("^").split(":")[0]
        if quoted in known or base in known:
            return True
    for word in re.findall(r"[^\s'\",()\[\]]+", text):
        if word.rstrip(".:;").split(":")[0] in known:
            return True
    return bool(re.search(r"\b(node|function|tensor|feed|fetch|placeholder|input|output) '", text))


def values_equal(a: Any, b: Any, loose: bool = False) -> bool:
    """Equal dtype and shape, and values equal within float rounding (NaN equals NaN)."""
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if {a.dtype.kind, b.dtype.kind} == {"O", "S"} and a.shape == b.shape:
        # strings: object arrays of bytes in memory, fixed-width bytes once saved to .npz
        return bool(a.tolist() == b.tolist())
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        rtol, atol = (1e-5, 1e-8) if a.dtype.itemsize >= 8 else (2e-3, 1e-5)
        if loose:
            rtol, atol = 2e-2, 1e-3
        with np.errstate(all="ignore"):
            return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    if a.dtype.kind == "O":
        return bool(all(x == y for x, y in zip(a.ravel(), b.ravel())))
    return bool(np.array_equal(a, b))


def graph_names(graph: Any) -> list[str]:
    names = [op.name for op in graph.get_operations()]
    names += graph.library.names()
    return names


# -- the in-process evaluation ---------------------------------------------------------------------

@dataclass
class Reference:
    """The unmutated seed's values: forward fetches and gradients (None where unconnected)."""
    forward: list[Any]
    gradients: list[Any] | None


def _existing(graph: Any, names: list[str]) -> list[str]:
    out = []
    for name in names:
        op_name = name.split(":")[0]
        if op_name in graph:
            try:
                graph.get_tensor(name)
            except GradregError:
                continue
            out.append(name)
    return out


def run_backend(graph: Any, backend: str, fetches: list[Any], feeds: dict[str, Any]) -> list[Any]:
    session = gr.Session(graph, backend=backend)
    usable = {k: v for k, v in feeds.items() if k.split(":")[0] in graph}
    return list(session.run(fetches, usable))


def evaluate(path: str, mutant: Any, backends: list[str], reference: Reference | None, verdict: Verdict,
             seconds: float) -> None:
    """Load ``path`` and run, differentiate and write it as the oracle says, recording into ``verdict``."""
    where = [path, os.path.basename(path)]
    try:
        with time_limit(seconds):
            _evaluate(path, mutant, backends, reference, verdict, where)
    except FuzzTimeout as exc:
        verdict.note(verdict.stages[-1][0] + "+" if verdict.stages else "load", "timeout", str(exc))


def _evaluate(path, mutant, backends, reference, verdict, where) -> None:
    try:
        graph = gr.load_graph(path)
    except FuzzTimeout:
        raise
    except BaseException as exc:   # noqa: B036  (RecursionError, MemoryError are findings too)
        verdict.note("load", *classify_error(exc, where))
        return
    verdict.note("load", "ok")
    where = where + graph_names(graph) + list(mutant.feeds) + list(mutant.fetches)
    _check_write_back(graph, path, verdict)
    fetches = _existing(graph, mutant.fetches)
    forward = _run_all(graph, backends, fetches, mutant.feeds, verdict, "run", where)
    if mutant.preserves and reference is not None and forward is not None and fetches == mutant.fetches:
        _compare(verdict, "run~seed", forward, reference.forward)
    if mutant.grad is None:
        return
    ys, xs, grad_ys = mutant.grad
    if _existing(graph, ys) != ys or _existing(graph, xs) != xs or (grad_ys and _existing(graph, grad_ys) != grad_ys):
        return
    try:
        with graph.as_default():
            grads = as_dense_gradients(gr.gradients(
                [graph.get_tensor(y) for y in ys], [graph.get_tensor(x) for x in xs],
                grad_ys=[graph.get_tensor(t) for t in grad_ys] if grad_ys else None))
    except FuzzTimeout:
        raise
    except BaseException as exc:   # noqa: B036
        verdict.note("grad", *classify_error(exc, where + graph_names(graph)))
        return
    verdict.note("grad", "ok")
    connected = [g for g in grads if g is not None]
    values = _run_all(graph, backends, connected, mutant.feeds, verdict, "grad-run", where + graph_names(graph))
    if mutant.preserves and reference is not None and reference.gradients is not None and values is not None:
        expected = [g for g in reference.gradients if g is not None]
        if len(expected) == len(values):
            _compare(verdict, "grad~seed", values, expected, loose=True)
        else:
            verdict.note("grad~seed", "wrong", f"{len(values)} connected gradients, the seed has {len(expected)}")


def _run_all(graph, backends, fetches, feeds, verdict, stage, where) -> list[Any] | None:
    """Run ``fetches`` on every backend; the backends must agree. The first backend's values."""
    if not fetches:
        return None
    results: dict[str, Any] = {}
    for backend in backends:
        try:
            results[backend] = ("ok", run_backend(graph, backend, fetches, feeds))
            verdict.note(f"{stage}:{backend}", "ok")
        except FuzzTimeout:
            raise
        except BaseException as exc:   # noqa: B036
            kind, detail = classify_error(exc, where)
            results[backend] = (kind, detail)
            verdict.note(f"{stage}:{backend}", kind, detail)
    outcomes = list(results.values())
    first = outcomes[0]
    for backend, other in list(results.items())[1:]:
        if (first[0] == "ok") != (other[0] == "ok"):
            verdict.note(f"{stage}:agree", "disagree",
                         f"{backends[0]}: {_short(first)}; {backend}: {_short(other)}")
        elif first[0] == "ok":
            for name, a, b in zip(fetches, first[1], other[1]):
                if not values_equal(a, b, loose=True):
                    verdict.note(f"{stage}:agree", "disagree", f"{_name(name)}: {backends[0]} {_brief(a)}, "
                                                               f"{backend} {_brief(b)}")
                    break
    return first[1] if first[0] == "ok" else None


def _compare(verdict, stage, actual, expected, loose: bool = False) -> None:
    for i, (a, b) in enumerate(zip(actual, expected)):
        if not values_equal(a, b, loose):
            verdict.note(stage, "wrong", f"fetch {i}: {_brief(a)} but the seed gives {_brief(b)}")
            return
    verdict.note(stage, "ok")


def _check_write_back(graph, path, verdict) -> None:
    """What loads can be written, in both formats, and read again."""
    directory = os.path.dirname(path)
    for suffix in (".pb", ".pbtxt"):
        out = os.path.join(directory, f"written{suffix}")
        try:
            gr.save_graph(graph, out)
            gr.load_graph(out)
        except FuzzTimeout:
            raise
        except BaseException as exc:   # noqa: B036
            kind, detail = classify_error(exc, [out])
            verdict.note(f"write{suffix}", "unwritable" if kind == "error" else kind, detail)
            return
    verdict.note("write", "ok")


def _short(result: tuple[str, Any]) -> str:
    return "a value" if result[0] == "ok" else f"{result[0]} {str(result[1])[:160]}"


def _name(fetch: Any) -> str:
    return getattr(fetch, "name", str(fetch))


def _brief(value: Any) -> str:
    if value is None:
        return "None"
    a = np.asarray(value)
    if a.size <= 4:
        return f"{a.dtype}{list(a.shape)} {a.ravel().tolist()}"
    return f"{a.dtype}{list(a.shape)} first {a.ravel()[:3].tolist()}"
