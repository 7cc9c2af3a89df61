"""What gradreg can do with an op type: define it, run it (per backend), differentiate it,
and, for what it cannot, which known plugin would provide it.

Differentiation errors (gradreg.autodiff) and ``gradreg check`` ask here, so both say the same
thing about a missing piece:

    >>> support = op_support("MatMul")
    >>> support.missing()
    []
    >>> op_support("Frobnicate").missing()
    ['op definition', 'numpy kernel', 'gradient rule']

A *known plugin* is one gradreg knows of without it being installed: gradreg's own op families
(whose entry points an old install of gradreg may lack, or which failed to load) and the
example third-party plugin shipped in plugins/. For those, the message names the plugin and
how to install it.
"""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from gradreg.errors import GradregError, PluginError
from gradreg.model.frames import STRUCTURE
from gradreg.registry.plugins import Provided, Registry, Table, get_registry


@dataclass(frozen=True)
class KnownPlugin:
    """A plugin gradreg knows of: its entry-point name and target, how to install it, and the
    op types it provides when its module cannot be imported to ask it."""
    name: str
    target: str
    install: str
    op_types: tuple[str, ...] = ()


# gradreg's own families (the entry points of pyproject.toml) and the example plugin.
_BUILT_IN = "reinstall gradreg (pip install -e .) so its entry points are registered"
KNOWN_PLUGINS: tuple[KnownPlugin, ...] = tuple(
    KnownPlugin(name, f"gradreg_plugins.{name}:family", _BUILT_IN)
    for name in ("array", "math", "nn", "image", "sparse", "control_flow", "function_call", "training", "random",
                 "onnx")
) + (KnownPlugin("swish", "gradreg_swish:family", "pip install ./plugins/gradreg-swish", ("Swish",)),)


@dataclass(frozen=True)
class OpSupport:
    """For one op type: who provides its definition, a kernel per backend and its gradient
    (None where nothing does). ``gradient`` is "not differentiable" for NotDifferentiable ops;
    ``known`` names a known plugin, not loaded, that provides the op type; ``similar`` are
    defined op types with close names, for an op type nothing defines (a misspelling?)."""
    op_type: str
    definition: str | None
    kernels: dict[str, str | None] = field(default_factory=dict)
    gradient: str | None = None
    known: KnownPlugin | None = None
    similar: tuple[str, ...] = ()

    def missing(self, backends: Iterable[str] | None = None, gradient: bool = True) -> list[str]:
        """What is missing, in words: "op definition", "<backend> kernel", "gradient rule"."""
        out = [] if self.definition else ["op definition"]
        for backend in self.kernels if backends is None else backends:
            if not self.kernels.get(backend):
                out.append(f"{backend} kernel")
        if gradient and not self.gradient:
            out.append("gradient rule")
        return out

    def hint(self) -> str:
        """Where the missing pieces would come from ("" if gradreg knows of no plugin)."""
        if self.known is not None:
            return f"plugin '{self.known.name}' provides op type '{self.op_type}': {self.known.install}"
        if self.definition and not self.gradient:
            return f"plugin '{self.definition}' defines the op but no gradient"
        if self.similar:
            return "did you mean " + " or ".join(f"'{t}'" for t in self.similar) + "?"
        return ""

    def describe(self, backends: Iterable[str] | None = None, gradient: bool = True) -> str:
        """One phrase for messages: "no op definition, numpy kernel or gradient rule (hint)"."""
        missing = self.missing(backends, gradient)
        text = "no " + _join(missing) if missing else "nothing missing"
        hint = self.hint()
        return f"{text} ({hint})" if hint else text


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def op_support(op_type: str, backends: Iterable[str] | None = None, library_function: bool = False,
               registry: Registry | None = None) -> OpSupport:
    """What the installed plugins provide for ``op_type``; kernels for ``backends`` (default:
    numpy). ``library_function``: the op type names a function of the graph's library (its
    calls run and differentiate through the function-call plugin)."""
    registry = registry or get_registry()
    backends = ("numpy",) if backends is None else tuple(backends)
    calls = registry.function_call() if library_function else None
    definition = _provider(registry.ops, op_type)
    if definition is None and library_function:
        definition = "function library"
    kernels = {b: _kernel_provider(registry, op_type, b, calls) for b in backends}
    gradient = _gradient_provider(registry, op_type, calls)
    known = None
    if definition is None or gradient is None or not all(kernels.values()):
        known = _known_provider(registry, op_type)
    similar = tuple(similar_op_types(op_type, registry)) if definition is None and known is None else ()
    return OpSupport(op_type, definition, kernels, gradient, known, similar)


def similar_op_types(op_type: str, registry: Registry | None = None, n: int = 3) -> list[str]:
    """Defined op types whose names are close to ``op_type`` (difflib; case ignored), best first."""
    registry = registry or get_registry()
    by_lower: dict[str, str] = {}
    for name in registry.ops:
        by_lower.setdefault(name.lower(), name)
    return [by_lower[m] for m in difflib.get_close_matches(op_type.lower(), list(by_lower), n=n, cutoff=0.75)]


def _provider(table: Table, key: str) -> str | None:
    try:
        found = table.lookup(key)
    except PluginError as exc:   # a conflict: report it as the provider's name
        return f"conflict: {exc}"
    return None if found is None else str(found.plugin)


def _kernel_provider(registry: Registry, op_type: str, backend: str, calls: Provided | None) -> str | None:
    if op_type in STRUCTURE:
        return "plan compiler"   # v1 control flow is compiled into Python control flow
    try:
        tables = registry.backend(backend).kernel_tables
    except GradregError:   # no such backend plugin: its own kernel table, if any
        tables = (backend,)
    for table in tables:
        found = registry.kernels(table).lookup(op_type)
        if found is not None:
            return str(found.plugin)
    if calls is not None and calls.value.kernel is not None:
        return str(calls.plugin)
    return None


def _gradient_provider(registry: Registry, op_type: str, calls: Provided | None) -> str | None:
    try:
        found = registry.gradients.lookup(op_type)
    except PluginError as exc:
        return f"conflict: {exc}"
    if found is not None:
        return "not differentiable" if found.value is None else str(found.plugin)
    if calls is not None and calls.value.gradient is not None:
        return str(calls.plugin)
    return None


def _known_provider(registry: Registry, op_type: str) -> KnownPlugin | None:
    """A known plugin that is not loaded (absent, or failed) and provides ``op_type``."""
    for known in KNOWN_PLUGINS:
        record = registry.plugins.get(known.name)
        if record is not None and record.loaded:
            continue
        if op_type in _known_op_types(known):
            return known
    return None


_KNOWN_OP_TYPES: dict[str, frozenset[str]] = {}


def _known_op_types(known: KnownPlugin) -> frozenset[str]:
    cached = _KNOWN_OP_TYPES.get(known.name)
    if cached is None:
        cached = frozenset(known.op_types)
        module_name, _, attr = known.target.partition(":")
        try:   # ask the plugin itself when its module is importable
            plugin = getattr(importlib.import_module(module_name), attr)
            cached |= {d.name for d in plugin.gradreg_op_definitions()} | set(plugin.gradreg_gradients())
        except Exception:   # not installed, or broken: the static list is all we know
            pass
        _KNOWN_OP_TYPES[known.name] = cached
    return cached
