"""The registry: op definitions, kernels, shape functions, gradient rules and builders,
gathered from plugins through pluggy, each entry remembering the plugin it came from.

Plugins are found through the entry-point group ``gradreg.plugins`` (gradreg's own op
families are listed there too). A plugin that fails to import, or whose hook raises,
is recorded with its error and a warning; the others load normally. Two plugins
providing one op type in one table is a conflict, raised (naming both) when that op
type is looked up, unless one of them declares the override.

    >>> registry = get_registry()
    >>> registry.gradients.lookup("MatMul").plugin
    'math'
"""
from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import BuiltinFunctionType, FunctionType, MappingProxyType, ModuleType
from typing import Any

import pluggy

from gradreg.errors import GradregError, PluginError
from gradreg.model import catalog
from gradreg.model.graph import Operation
from gradreg.model.opdefs import OpDefinition, ShapeFn
from gradreg.registry import hookspecs
from gradreg.registry.discovery import entry_points
from gradreg.registry.extensions import Backend, GraphFormat
from gradreg.registry.kernels import fold_constant

# The key of the one entry of the function-call table (it is not an op type).
LIBRARY_FUNCTIONS = "library functions"


class PluginWarning(UserWarning):
    """A plugin failed to load or one of its hooks raised; the other plugins still work."""


@dataclass(frozen=True)
class Provided:
    """A table entry and the plugin that provided it."""
    value: Any
    plugin: str


@dataclass
class PluginRecord:
    """What ``gradreg plugins`` shows about one plugin."""
    name: str
    version: str = ""
    distribution: str = ""
    target: str = ""
    errors: list[str] = field(default_factory=list)
    provides: dict[str, set[str]] = field(default_factory=dict)
    overrides: set[str] = field(default_factory=set)

    @property
    def loaded(self) -> bool:
        return not any(e.startswith("load:") for e in self.errors)


@dataclass(frozen=True)
class PluginSource:
    """A plugin to register: an object with hookimpls, plus its metadata."""
    name: str
    load: Callable[[], Any]
    version: str = ""
    distribution: str = ""
    target: str = ""


def entry_point_sources() -> list[PluginSource]:
    """The plugins installed distributions declare (entry point group ``gradreg.plugins``), by name."""
    return [PluginSource(name=ep.name, load=ep.load, version=ep.version, distribution=ep.distribution,
                         target=ep.value)
            for ep in sorted(entry_points(hookspecs.ENTRY_POINT_GROUP), key=lambda e: e.name)]


class _PluginManager(pluggy.PluginManager):
    """pluggy's manager, with a cheap first test of each name of a plugin. pluggy looks every
    name of ``dir(plugin)`` up with ``inspect.getattr_static`` to find the hookimpl marks; the
    built-in plugins have ~900 names, which cost ~10 ms at every start. A name whose value sits
    plainly in the plugin's (or its class's) namespace and carries no mark is skipped; anything
    else (a slot, a descriptor, a value that says it has the mark) gets pluggy's own test."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            return None
        marker = self.project_name + "_impl"
        owners = (plugin,) if isinstance(plugin, ModuleType) else (
            plugin.__mro__ if isinstance(plugin, type) else (plugin, *type(plugin).__mro__))
        for owner in owners:
            namespace = getattr(owner, "__dict__", None)
            if not isinstance(namespace, (dict, MappingProxyType)) or name not in namespace:
                continue
            value = namespace[name]
            if isinstance(value, (FunctionType, BuiltinFunctionType, int, float, str, bytes, bool, type(None),
                                  list, tuple, dict, set, frozenset, type, ModuleType)) \
                    and not hasattr(value, marker):
                return None   # a plain value or function without the mark
            break
        return super().parse_hookimpl_opts(plugin, name)


class Table:
    """op type (or builder name) -> Provided, with conflict tracking and user registrations."""

    def __init__(self, kind: str, overriders: dict[str, set[str]],
                 complete: Callable[[str | None], None] | None = None, fill: Callable[[], None] | None = None):
        self.kind = kind
        self._entries: dict[str, Provided] = {}
        self._conflicts: dict[str, list[str]] = {}
        self._resolved: dict[str, list[str]] = {}   # key -> the overriders that lost to the one in _entries
        self._shadowed: dict[str, list[Provided]] = {}   # key -> entries an override replaced, oldest first
        self._warned: set[str] = set()   # resolved keys whose lookup has warned
        self._overriders = overriders   # op type -> plugins declaring they override it (shared)
        # Called before a key is looked up that is not here (with the key) or before every key
        # is listed (with None): the registry completes the deferred families concerned. Only
        # the tables keyed by op type have it: a deferred family provides nothing else
        # (builders, backends, formats) until it is completed.
        self._complete = complete
        # Called before the table is first read or set: the rule tables (gradients, iteration
        # rules, function calls) are filled when first needed, which imports the families'
        # kernel and gradient modules (OpFamily's ``kernel_modules``, ``gradient_modules``); the registry
        # clears it once they are filled.
        self._fill = fill

    def _ensure(self) -> None:
        if self._fill is not None:
            self._fill()

    def _missing(self, key: str) -> None:
        self._ensure()
        if self._complete is not None and key not in self._entries:
            self._complete(key)

    def add(self, key: str, value: Any, plugin: str, overrides: set[str]) -> None:
        existing = self._entries.get(key)
        if existing is None or existing.plugin == plugin:
            self._entries[key] = Provided(value, plugin)
            return
        incumbent_overrides = existing.plugin in self._overriders.get(key, ())
        if key in overrides and incumbent_overrides:   # both declared it: the first by name wins
            self._resolve(key, existing, Provided(value, plugin))
            return
        if key in overrides:                       # the newcomer declared the override
            self._shadowed.setdefault(key, []).append(existing)
            self._entries[key] = Provided(value, plugin)
            self._conflicts.pop(key, None)
            return
        if incumbent_overrides:                    # the incumbent declared it
            return
        self._conflicts.setdefault(key, [existing.plugin]).append(plugin)

    def _resolve(self, key: str, existing: Provided, newcomer: Provided) -> None:
        """Two plugins both declare they override ``key``: the one whose name sorts first wins,
        whatever the order they load in (lookup warns, once, naming them all)."""
        winner, loser = sorted((existing, newcomer), key=lambda p: p.plugin)
        self._entries[key] = winner
        self._shadowed.setdefault(key, []).append(loser)
        self._conflicts.pop(key, None)
        losers = self._resolved.setdefault(key, [])
        losers[:] = sorted({*losers, loser.plugin} - {winner.plugin})
        self._warned.discard(key)

    def _warn_resolved(self, key: str) -> None:
        self._warned.add(key)
        used = self._entries[key].plugin
        warnings.warn(f"plugins {_names([used, *self._resolved[key]])} all override the {self.kind} of '{key}': "
                      f"'{used}' is used (the first by name); uninstall the others to silence this",
                      PluginWarning, stacklevel=3)

    def lookup(self, key: str) -> Provided | None:
        """The entry for ``key``, or None; PluginError if plugins conflict over it."""
        self._missing(key)
        conflict = self._conflicts.get(key)
        if conflict:
            names = _names(conflict)
            raise PluginError(f"plugins {names} both provide the {self.kind} of '{key}'; uninstall one, "
                              f"or have one declare the override (gradreg_overrides)")
        if key in self._resolved and key not in self._warned and key in self._entries:
            self._warn_resolved(key)
        return self._entries.get(key)

    def set(self, key: str, value: Any, source: str) -> None:
        """Provide ``key`` from ``source``, replacing any entry and clearing a conflict
        (registrations from Python code: RegisterGradient, NotDifferentiable)."""
        self._ensure()
        self._entries[key] = Provided(value, source)
        self._conflicts.pop(key, None)

    def drop_plugin(self, plugin: str) -> None:
        """Forget every entry ``plugin`` provided; where it had overridden another plugin's, the
        latest replaced entry of a remaining plugin is back in use."""
        for shadowed in self._shadowed.values():
            shadowed[:] = [p for p in shadowed if p.plugin != plugin]
        for key in [k for k, entry in self._entries.items() if entry.plugin == plugin]:
            del self._entries[key]
            self._resolved.pop(key, None)
            if self._shadowed.get(key):
                self._entries[key] = self._shadowed[key].pop()
        for key, losers in list(self._resolved.items()):
            if plugin in losers:
                losers.remove(plugin)
                if not losers:
                    del self._resolved[key]
        for key, plugins in list(self._conflicts.items()):
            if plugin in plugins:
                plugins.remove(plugin)
                if len(plugins) < 2:
                    del self._conflicts[key]

    def provider(self, key: str) -> str | None:
        """The plugin (or source) of the entry for ``key``, without raising on conflicts."""
        self._missing(key)
        entry = self._entries.get(key)
        return None if entry is None else entry.plugin

    def _all(self) -> None:
        self._ensure()
        if self._complete is not None:
            self._complete(None)

    def keys(self) -> list[str]:
        self._all()
        return list(self._entries)

    def __iter__(self) -> Iterator[str]:
        self._all()
        return iter(list(self._entries))

    def conflicts(self) -> dict[str, list[str]]:
        self._all()
        return {k: list(v) for k, v in self._conflicts.items()}

    def resolved(self) -> dict[str, tuple[str, list[str]]]:
        """Keys several plugins override: key -> (the plugin used, the others)."""
        self._all()
        return {k: (self._entries[k].plugin, list(v)) for k, v in self._resolved.items() if k in self._entries}

    def __contains__(self, key: str) -> bool:
        self._missing(key)
        return key in self._entries or key in self._conflicts


class Registry:
    """All plugin tables. Built lazily by :func:`get_registry`; tests may build their own from
    explicit :class:`PluginSource` lists."""

    def __init__(self, sources: Iterable[PluginSource] | None = None):
        self._sources = list(entry_point_sources() if sources is None else sources)
        self.plugins: dict[str, PluginRecord] = {}
        self._overrides: dict[str, set[str]] = {}
        self.ops = Table("op definition", self._overrides, self._complete_deferred)
        self.shapes = Table("shape function", self._overrides, self._complete_deferred)
        self.api = Table("Python builder", self._overrides)
        # The rule tables are filled when first read (_fill_rules): reading them imports the
        # families' kernels and gradient-rule modules, which a command that only loads and
        # inspects a graph never needs. A gradient of None: NotDifferentiable.
        self._rules_state = "empty"
        self.gradients = Table("gradient", self._overrides, self._complete_deferred, self._fill_rules)
        self.iteration_sums = Table("iteration-sum rule", self._overrides, self._complete_deferred, self._fill_rules)
        self.iteration_stacks = Table("iteration-stack rule", self._overrides, self._complete_deferred,
                                      self._fill_rules)
        self.loop_hoists = Table("loop-hoist rule", self._overrides, self._complete_deferred, self._fill_rules)
        self.function_calls = Table("handling", self._overrides, fill=self._fill_rules)
        self.backends = Table("execution backend", self._overrides)
        self.formats = Table("graph format", self._overrides)
        self._kernels: dict[str, Table] = {}
        self._lock = threading.RLock()
        self._deferred: dict[str, tuple[tuple[str, ...], Any]] = {}   # plugin -> (op type prefixes, family)
        self._completing: set[str] = set()     # deferred families being completed (by the lock's holder)
        self._manager = _PluginManager(hookspecs.PROJECT)
        self._manager.add_hookspecs(hookspecs)
        self._load()

    # -- loading -----------------------------------------------------------------------
    def _load(self) -> None:
        records = [self._register(source) for source in self._sources]
        for record in records:
            self._read_overrides(record)
        for record in self._loaded():
            plugin = self._manager.get_plugin(record.name)
            prefixes = tuple(getattr(plugin, "deferred_prefixes", ()) or ())
            if prefixes and callable(getattr(plugin, "complete", None)):
                self._deferred[record.name] = (prefixes, plugin)
            else:
                self._load_tables(record)

    def _complete_deferred(self, key: str | None) -> None:
        """Complete the deferred families whose op types ``key`` may be (all of them for None):
        import what fills their tables, then add their entries to every table."""
        if not self._deferred and not self._completing:
            return
        with self._lock:   # a family being completed by another thread: wait for it, do not list half of it
            for name, (prefixes, plugin) in list(self._deferred.items()):
                if name in self._completing or (key is not None and not key.startswith(prefixes)):
                    continue
                # The family stays deferred until its tables are read: another thread asking
                # meanwhile waits on the lock rather than finding them half filled (the thread
                # completing it, asking again while it imports, goes on).
                self._completing.add(name)
                try:
                    self._read_whole(self.plugins[name], plugin.complete)
                finally:
                    self._completing.discard(name)
                    self._deferred.pop(name, None)

    def complete_all(self) -> None:
        """Complete every deferred family and fill the rule tables (for listings: what each
        plugin provides)."""
        self._fill_rules()
        self._complete_deferred(None)

    def _rule_tables(self) -> tuple[Table, ...]:
        return self.gradients, self.iteration_sums, self.iteration_stacks, self.loop_hoists, self.function_calls

    def _fill_rules(self) -> None:
        """Read every active plugin's gradient, iteration, loop-hoist and function-call hooks
        into their tables (once, on first use of any of them)."""
        if self._rules_state == "filled":
            return
        with self._lock:
            if self._rules_state != "empty":   # filled meanwhile, or being filled by this thread
                return
            self._rules_state = "filling"
            try:
                for record in self._active():
                    self._load_rules(record)
            finally:
                self._rules_state = "filled"
                for table in self._rule_tables():
                    table._fill = None

    def _register(self, source: PluginSource) -> PluginRecord:
        record = PluginRecord(source.name, source.version, source.distribution, source.target)
        self.plugins[source.name] = record
        try:
            obj = source.load()
            self._manager.register(obj, name=source.name)
        except Exception as exc:   # a broken plugin must not take the others down
            self._fail(record, "load", exc)
        return record

    def _read_overrides(self, record: PluginRecord) -> None:
        if record.loaded:
            record.overrides = set(self._call(record, "gradreg_overrides") or ())
            for key in record.overrides:
                self._overrides.setdefault(key, set()).add(record.name)

    def add_plugin(self, source: PluginSource) -> PluginRecord:
        """Register one more plugin now: its entries join every table (kernel tables already
        built included). Entry points are the usual way to install a plugin; this one is for
        plugins made at run time (a test, a notebook). PluginError if the name is taken."""
        with self._lock:
            if source.name in self.plugins:
                raise PluginError(f"a plugin named '{source.name}' is already registered")
            self._sources.append(source)
            record = self._register(source)
            self._read_overrides(record)
            if record.loaded:   # a deferred family added at run time is read whole now
                self._read_whole(record, getattr(self._manager.get_plugin(source.name), "complete", None))
        return record

    def _read_whole(self, record: PluginRecord, complete: Callable[[], Any] | None) -> None:
        """Add a plugin's entries to every table, the kernel tables already built included,
        after ``complete()`` has filled a deferred family's (a failure there is the plugin's
        load failure: it provides nothing)."""
        if callable(complete):
            try:
                complete()
            except Exception as exc:   # a broken plugin must not take the others down
                self._fail(record, "load", exc)
                return
        self._load_tables(record)
        for backend, table in self._kernels.items():
            for key, factory in (self._call(record, "gradreg_kernels", backend=backend) or {}).items():
                self._add(table, f"kernel:{backend}", key, factory, record)

    def _load_tables(self, record: PluginRecord) -> None:
        for definition in self._call(record, "gradreg_op_definitions") or ():
            definition.plugin = record.name
            self._add(self.ops, "op", definition.name, definition, record)
            if definition.shape is not None:   # a shape function given with the definition
                record.provides.setdefault("shape", set()).add(definition.name)
            for api_name in definition.api_names:
                # The build layer turns an op definition into its builder (gradreg.build.builders).
                self._add(self.api, "builder", api_name, definition, record)
        for hook, kind, table in (("gradreg_shape_functions", "shape", self.shapes),
                                  ("gradreg_api_functions", "builder", self.api)):
            for key, value in (self._call(record, hook) or {}).items():
                self._add(table, kind, key, value, record)
        for backend in self._call(record, "gradreg_backends") or ():
            self._add(self.backends, "backend", backend.name, backend, record)
        for graph_format in self._call(record, "gradreg_graph_formats") or ():
            self._add(self.formats, "graph format", graph_format.name, graph_format, record)
        if self._rules_state != "empty":   # a plugin added (or completed) once the rule tables are in use
            self._load_rules(record)

    def _load_rules(self, record: PluginRecord) -> None:
        for hook, kind, table in (("gradreg_gradients", "gradient", self.gradients),
                                  ("gradreg_iteration_sums", "iteration sum", self.iteration_sums),
                                  ("gradreg_iteration_stacks", "iteration stack", self.iteration_stacks),
                                  ("gradreg_loop_hoists", "loop hoist", self.loop_hoists)):
            for key, value in (self._call(record, hook) or {}).items():
                self._add(table, kind, key, value, record)
        function_call = self._call(record, "gradreg_function_call")
        if function_call is not None:
            self._add(self.function_calls, "function calls", LIBRARY_FUNCTIONS, function_call, record)

    def _loaded(self) -> list[PluginRecord]:
        return [r for r in self.plugins.values() if r.loaded]

    def _active(self) -> list[PluginRecord]:
        """Loaded plugins whose tables are read (deferred families join when completed)."""
        return [r for r in self._loaded() if r.name not in self._deferred]

    def _fail(self, record: PluginRecord, stage: str, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        record.errors.append(f"{stage}: {message}")
        warnings.warn(f"gradreg plugin '{record.name}' failed ({stage}): {message}", PluginWarning, stacklevel=3)

    def _call(self, record: PluginRecord, hook_name: str, **kwargs: Any) -> Any:
        hook = getattr(self._manager.hook, hook_name)
        for impl in hook.get_hookimpls():
            if impl.plugin_name != record.name:
                continue
            try:
                return impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception as exc:
                self._fail(record, hook_name, exc)
                return None
        return None

    def _add(self, table: Table, kind: str, key: str, value: Any, record: PluginRecord) -> None:
        table.add(key, value, record.name, record.overrides)
        record.provides.setdefault(kind, set()).add(key)

    def remove_plugin(self, name: str) -> None:
        """Unregister a plugin added with :meth:`add_plugin`: its entries leave every table."""
        with self._lock:
            if self.plugins.pop(name, None) is None:
                raise PluginError(f"no plugin named '{name}' is registered")
            self._sources = [s for s in self._sources if s.name != name]
            if self._manager.has_plugin(name):
                self._manager.unregister(name=name)
            self._deferred.pop(name, None)
            for table in self._tables():
                table.drop_plugin(name)

    def _tables(self) -> list[Table]:
        return [self.ops, self.shapes, self.gradients, self.api, self.iteration_sums, self.iteration_stacks,
                self.loop_hoists, self.backends, self.formats, self.function_calls, *self._kernels.values()]

    # -- lookups -------------------------------------------------------------------------
    def op_definition(self, op_type: str) -> OpDefinition | None:
        found = self.ops.lookup(op_type)
        return None if found is None else found.value

    def shape_function(self, op_type: str, definition: OpDefinition | None = None) -> ShapeFn | None:
        found = self.shapes.lookup(op_type)
        if found is not None:
            shape_fn: ShapeFn = found.value
            return shape_fn
        if definition is None:
            definition = self.op_definition(op_type)
        return None if definition is None else definition.shape

    def kernels(self, backend: str = "numpy") -> Table:
        """The kernel table of ``backend``, built on first use (the numba table imports numba)."""
        table = self._kernels.get(backend)
        if table is None:
            with self._lock:
                table = self._kernels.get(backend)
                if table is None:
                    table = Table(f"{backend} kernel", self._overrides, self._complete_deferred)
                    for record in self._active():
                        for key, factory in (self._call(record, "gradreg_kernels", backend=backend) or {}).items():
                            self._add(table, f"kernel:{backend}", key, factory, record)
                    self._kernels[backend] = table
        return table

    def kernel_factory(self, op_type: str, backend: str = "numpy") -> Callable[..., Any] | None:
        found = self.kernels(backend).lookup(op_type)
        return None if found is None else found.value

    def iteration_sum(self, op_type: str) -> Callable[..., Any] | None:
        """The iteration-sum rule of ``op_type`` (hookspecs.gradreg_iteration_sums), if any."""
        found = self.iteration_sums.lookup(op_type)
        return None if found is None else found.value

    def iteration_stack(self, op_type: str) -> Callable[..., Any] | None:
        """The iteration-stack rule of ``op_type`` (hookspecs.gradreg_iteration_stacks), if any."""
        found = self.iteration_stacks.lookup(op_type)
        return None if found is None else found.value

    def loop_hoist(self, op_type: str) -> Callable[..., Any] | None:
        """The loop-hoist rule of ``op_type`` (hookspecs.gradreg_loop_hoists), if any."""
        found = self.loop_hoists.lookup(op_type)
        return None if found is None else found.value

    def function_call(self) -> Provided | None:
        """How library-function calls run and differentiate (a FunctionCall), with its plugin."""
        return self.function_calls.lookup(LIBRARY_FUNCTIONS)

    # -- backends ------------------------------------------------------------------------
    def backend(self, name: str) -> Backend:
        """The backend called ``name``; GradregError naming the known ones if there is none."""
        found = self.backends.lookup(name)
        if found is None:
            known = ", ".join(repr(b) for b in self.backend_names()) or "none"
            raise GradregError(f"unknown backend {name!r}: the installed backends are {known}")
        backend: Backend = found.value
        return backend

    def backend_names(self) -> list[str]:
        return sorted(self.backends.keys())

    def preferred_backend(self) -> str:
        """The available backend of highest priority (numba when it is installed)."""
        usable = [self.backend(n) for n in self.backend_names() if self.backend(n).available()]
        if not usable:
            raise GradregError("no execution backend is available (is gradreg installed?)")
        return max(usable, key=lambda b: b.priority).name

    # -- graph formats ---------------------------------------------------------------------
    def graph_formats(self) -> list[GraphFormat]:
        """Every installed graph format, in the order content is sniffed."""
        found = [self.formats.lookup(name) for name in self.formats]
        return sorted((p.value for p in found if p is not None), key=lambda f: (-f.sniff_order, f.name))

    def fold_constant(self, op: Operation, values: list[Any]) -> Any:
        """``op`` run on constant inputs with its NumPy kernel (None if it has none or fails)."""
        try:
            factory = self.kernel_factory(op.type, "numpy")
        except PluginError:
            return None
        return fold_constant(op, values, factory)

    def gradient_plugin(self, name: str) -> str | None:
        """The plugin providing the gradient registered as ``name`` (None if none, or if plugins
        conflict over it: differentiation reports that)."""
        try:
            found = self.gradients.lookup(name)
        except PluginError:
            return None
        return None if found is None else found.plugin

    def register_gradient(self, op_type: str, rule: Callable[..., Any] | None, source: str,
                          override: bool = False) -> None:
        """Register a gradient from Python code (gradreg.RegisterGradient / NotDifferentiable)."""
        existing = self.gradients.provider(op_type)
        if existing is not None and not override and existing != source:
            raise PluginError(f"a gradient for '{op_type}' is already registered by '{existing}'; "
                              f"pass override=True to replace it")
        self.gradients.set(op_type, rule, source)

    def _named_tables(self) -> dict[str, Table]:
        tables = {"op definition": self.ops, "shape": self.shapes, "gradient": self.gradients,
                  "builder": self.api, "iteration sum": self.iteration_sums,
                  "iteration stack": self.iteration_stacks, "loop hoist": self.loop_hoists,
                  "backend": self.backends,
                  "graph format": self.formats, "function calls": self.function_calls}
        tables.update({f"kernel:{b}": t for b, t in self._kernels.items()})
        return tables

    def conflicts(self) -> dict[str, dict[str, list[str]]]:
        """Per table, the keys two plugins provide with no override declared (looking one up raises)."""
        return {name: t.conflicts() for name, t in self._named_tables().items() if t.conflicts()}

    def resolved_conflicts(self) -> dict[str, dict[str, tuple[str, list[str]]]]:
        """Per table, the keys several plugins declare they override: key -> (the plugin used, the
        plugins it won over, by name order)."""
        return {name: t.resolved() for name, t in self._named_tables().items() if t.resolved()}

    def plugin_entries(self, name: str, hook: str, **kwargs: Any) -> Any:
        """What plugin ``name``'s own ``hook`` returns (None if it does not implement it or
        failed), whether or not its entries are the ones in use: the plugin checker reads a
        plugin's rules, NotDifferentiable claims and check cases this way."""
        record = self.plugins.get(name)
        if record is None:
            raise PluginError(f"no plugin named '{name}' is registered")
        if name in self._deferred:
            self._complete_deferred(None)
        return self._call(record, hook, **kwargs) if record.loaded else None

    def release(self, name: str) -> str:
        """The distribution and version that provided plugin ``name``, as ``"gradreg-swish==0.1.0"``
        ("" for a plugin added at run time, or a name that is no plugin's: gradient graphs record
        it next to each rule, gradreg.autodiff.provenance)."""
        record = self.plugins.get(name)
        if record is None or not record.distribution:
            return ""
        return f"{record.distribution}=={record.version}" if record.version else record.distribution

    def provider_of(self, op_type: str) -> str | None:
        """The plugin providing anything for ``op_type`` (for error messages), if any."""
        for table in (self.ops, self.gradients, self.shapes, *self._kernels.values()):
            plugin = table.provider(op_type)
            if plugin is not None:
                return plugin
        return None


def _names(plugins: Iterable[str]) -> str:
    return " and ".join(f"'{p}'" for p in plugins)


_registry: Registry | None = None
_registry_lock = threading.RLock()
_loading = False


def get_registry() -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _registry, _loading
    if _registry is None:
        with _registry_lock:
            if _loading:
                raise PluginError("a plugin used the gradreg registry while plugins were still loading; "
                                  "plugins must not build ops or look up builders at import time")
            if _registry is None:
                _loading = True
                try:
                    _registry = Registry()
                finally:
                    _loading = False
                if not _registry.plugins:
                    warnings.warn("no gradreg plugins found in entry-point group 'gradreg.plugins': "
                                  "is gradreg installed (pip install .)?", PluginWarning, stacklevel=2)
    return _registry


# The registry is the graph model's op catalog (dependency inversion: gradreg.model cannot
# import this layer, so this layer installs itself; see gradreg.model.catalog).
catalog.install(get_registry)
