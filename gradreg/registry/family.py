"""OpFamily: build a plugin's tables with decorators, next to the ops they describe.

    from gradreg.plugin import OpFamily
    from gradreg import shape_fns

    family = OpFamily("swish")
    family.op("Swish", inputs=["x: T"], outputs=["y: T"], attrs=["T: {floattypes}"],
              shape=shape_fns.unchanged, api="swish")

    @family.kernel("Swish")
    def _swish_kernel(op, ctx):
        return lambda x: x / (1 + np.exp(-x))

    @family.gradient("Swish")
    def _swish_grad(op, grad):
        ...

The package's entry point names the family object: ``swish = "gradreg_swish:family"``.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from gradreg.errors import DuplicateRuleError, PluginError
from gradreg.model.opdefs import OpDefinition
from gradreg.registry.cases import Case, make_case
from gradreg.registry.extensions import FunctionCall
from gradreg.registry.hookspecs import hookimpl
from gradreg.registry.kernels import constant_factory


class OpFamily:
    """A plugin's op definitions, kernels, shape functions, gradient rules and builders."""

    def __init__(self, name: str, overrides: Iterable[str] = (), lazy_kernels: dict[str, str] | None = None,
                 deferred: Iterable[str] = (), complete: str | None = None,
                 kernel_modules: Iterable[str] = (), gradient_modules: Iterable[str] = ()):
        """``lazy_kernels`` maps a backend to a module imported only when that backend's kernels
        are first asked for (so ``import numba`` happens only when the numba backend is used).

        ``kernel_modules`` and ``gradient_modules`` name modules that define no op, shape
        function or builder: the first hold kernels (and may hold rules), the second gradient
        rules only (and the other rules: iteration sums and stacks, loop hoists, function
        calls). The family imports the first when a kernel table is first built, both when a
        rule table is first read: a command that only loads and inspects a graph imports no
        gradient rule, and only the kernels constant folding needs. A module listed here that
        defines an op would hide it until then; tests/test_start_up.py checks that the tables
        are the same either way.

        A family whose op types all start with one of the ``deferred`` prefixes (the onnx
        family's ``onnx::``) may leave its tables empty until first needed: the registry then
        imports the ``complete`` module (which fills them) when a lookup names such an op
        type, or when something lists every op type. Builders, backends and formats of such a
        family appear only once it is complete: a deferred family should not provide them."""
        self.name = name
        self.lazy_kernels = dict(lazy_kernels or {})
        self.deferred_prefixes = tuple(deferred)
        self._complete_module = complete
        self._kernel_modules = list(kernel_modules)
        self._gradient_modules = list(gradient_modules)
        if self.deferred_prefixes and complete is None:
            raise PluginError(f"op family '{name}': deferred prefixes need the module that completes the family")
        self.definitions: list[OpDefinition] = []
        self.kernels: dict[str, dict[str, Callable[..., Any]]] = {}     # backend -> op type -> kernel factory
        self.gradients: dict[str, Callable[..., Any] | None] = {}
        self.iteration_sums: dict[str, Callable[..., Any]] = {}
        self.iteration_stacks: dict[str, Callable[..., Any]] = {}
        self.loop_hoists: dict[str, Callable[..., Any]] = {}
        self.calls: FunctionCall | None = None
        self.shapes: dict[str, Callable[..., Any]] = {}
        self.api: dict[str, Callable[..., Any]] = {}
        self.namespaced: dict[str, str] = {}    # "nn.relu" -> "relu": a builder (or op type) of this family
        self.overrides = set(overrides)
        self.cases: dict[str, list[Case]] = {}   # op type -> how the plugin checker tries it

    # -- table builders --------------------------------------------------------------
    def op(self, name: str, **fields: Any) -> OpDefinition:
        """Add an op table entry (fields as :class:`OpDefinition`)."""
        definition = OpDefinition(name, **fields)
        self.definitions.append(definition)
        return definition

    def kernel(self, op_type: str, backend: str = "numpy") -> Callable[..., Any]:
        """Decorator registering a kernel factory ``factory(op, ctx) -> compute``."""
        def register(factory: Callable[..., Any]) -> Callable[..., Any]:
            self.kernels.setdefault(backend, {})[op_type] = factory
            return factory
        return register

    def simple_kernel(self, op_type: str, fn: Callable[..., Any], backend: str = "numpy") -> None:
        """Register ``fn(*inputs)`` as the kernel of ``op_type``, whatever the node's attrs."""
        self.kernels.setdefault(backend, {})[op_type] = constant_factory(fn)

    def gradient(self, *op_types: str, override: bool = False) -> Callable[..., Any]:
        """Decorator registering ``rule(op, *grads)`` as the gradient of each of ``op_types``:
        ``@family.gradient("Add", "AddV2")``. An op type the family already has a rule for (or
        declared not differentiable) raises DuplicateRuleError naming both, unless ``override``
        says the new rule replaces the old one. (Another plugin's rule for the same op type is
        no duplicate: the registry resolves that by plugin name, docs/plugins.md.)"""
        if not op_types:
            raise PluginError(f"op family '{self.name}': gradient() needs at least one op type")

        def register(rule: Callable[..., Any]) -> Callable[..., Any]:
            for op_type in op_types:
                self._claim_gradient(op_type, rule, override)
            return rule
        return register

    def _claim_gradient(self, op_type: str, rule: Callable[..., Any] | None, override: bool) -> None:
        if op_type in self.gradients and not override:
            raise DuplicateRuleError(
                f"op family '{self.name}': a gradient for '{op_type}' is already registered "
                f"({_describe_rule(self.gradients[op_type])}); registering {_describe_rule(rule)} too needs "
                f"override=True")
        self.gradients[op_type] = rule

    def iteration_sum(self, op_type: str) -> Callable[..., Any]:
        """Decorator registering ``rule(op)`` as the iteration-sum rule of ``op_type`` (see
        gradreg.registry.hookspecs.gradreg_iteration_sums)."""
        def register(rule: Callable[..., Any]) -> Callable[..., Any]:
            self.iteration_sums[op_type] = rule
            return rule
        return register

    def iteration_stack(self, op_type: str) -> Callable[..., Any]:
        """Decorator registering ``rule(op, outside)`` as the iteration-stack rule of
        ``op_type`` (see gradreg.registry.hookspecs.gradreg_iteration_stacks)."""
        def register(rule: Callable[..., Any]) -> Callable[..., Any]:
            self.iteration_stacks[op_type] = rule
            return rule
        return register

    def loop_hoist(self, op_type: str) -> Callable[..., Any]:
        """Decorator registering ``rule(op, ctx, outside)`` as the loop-hoist rule of ``op_type``
        (see gradreg.registry.hookspecs.gradreg_loop_hoists)."""
        def register(rule: Callable[..., Any]) -> Callable[..., Any]:
            self.loop_hoists[op_type] = rule
            return rule
        return register

    def function_call_kernel(self, factory: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the kernel factory of nodes that call a library function by name."""
        self.calls = FunctionCall(factory, self.calls.gradient if self.calls else None)
        return factory

    def function_call_gradient(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the gradient rule of nodes that call a library function by name."""
        self.calls = FunctionCall(self.calls.kernel if self.calls else None, rule)
        return rule

    def not_differentiable(self, *op_types: str, override: bool = False) -> None:
        """Declare that no gradient flows through ``op_types`` (a rule already registered for one
        raises DuplicateRuleError, unless ``override``)."""
        for op_type in op_types:
            self._claim_gradient(op_type, None, override)

    def case(self, op_type: str, *inputs: Any, **options: Any) -> Case:
        """Declare how the plugin checker (gradreg.testing.check_plugin) tries ``op_type``: each
        input a shape (random values, differentiated), a list of shapes (a list input) or an
        array (held fixed); ``options`` as :func:`gradreg.registry.cases.make_case` (``attrs``,
        ``dtypes``, ``domain``, ``vjp``, ``tolerance``, ``second_order``,
        ``departs_from_tensorflow``, ``label``). ``family.case("Log", [2, 3], domain=(0.1, 3))``."""
        declared = make_case(op_type, inputs, **options)
        self.cases.setdefault(op_type, []).append(declared)
        return declared

    def shape(self, op_type: str) -> Callable[..., Any]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.shapes[op_type] = fn
            return fn
        return register

    def api_function(self, name: str | None = None) -> Callable[..., Any]:
        """Decorator exposing a Python builder as ``gradreg.<name>`` (a dotted name, such as
        ``"image.flip_left_right"``, puts it in that namespace only)."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.api[name or fn.__name__] = fn
            return fn
        return register

    def namespace(self, prefix: str, *names: str, **renamed: str) -> None:
        """Also expose builders of this family in the namespace ``gradreg.<prefix>``, under the
        names TensorFlow gives them there: ``namespace("nn", "relu")`` makes ``gradreg.nn.relu``
        the builder ``gradreg.relu``; ``namespace("linalg", band_part="matrix_band_part")``
        renames; a target may also be one of the family's op types (``inv="MatrixInverse"``:
        the generated builder ``gradreg.raw_ops.MatrixInverse``). Targets are resolved when the
        registry loads the family: one that the family does not provide fails the family's
        builders with an error naming it."""
        for name in names:
            self.namespaced[f"{prefix}.{name}"] = name
        for name, target in renamed.items():
            self.namespaced[f"{prefix}.{name}"] = target

    def _namespaced_builders(self) -> dict[str, Any]:
        """The namespaced names resolved to a builder function or an op definition."""
        by_api = {api: d for d in self.definitions for api in d.api_names}
        by_type = {d.name: d for d in self.definitions}
        resolved: dict[str, Any] = {}
        for name, target in self.namespaced.items():
            found = self.api.get(target) or by_api.get(target) or by_type.get(target)
            if found is None:
                raise PluginError(f"op family '{self.name}': gradreg.{name} names '{target}', which is "
                                  f"neither a builder nor an op type of this family")
            resolved[name] = found
        return resolved

    def complete(self) -> None:
        """Import the module filling the tables of a deferred family (once; the registry calls
        this before it reads them)."""
        module, self._complete_module = self._complete_module, None
        if module is not None:
            importlib.import_module(module)

    def import_kernels(self) -> None:
        """Import the family's ``kernel_modules`` (once; before a kernel table is read)."""
        _import_pending(self._kernel_modules)

    def import_rules(self) -> None:
        """Import the family's ``kernel_modules`` and ``gradient_modules`` (once; before a rule
        table is read)."""
        _import_pending(self._kernel_modules)
        _import_pending(self._gradient_modules)

    # -- pluggy hooks ----------------------------------------------------------------
    @hookimpl
    def gradreg_op_definitions(self) -> list[OpDefinition]:
        return list(self.definitions)

    @hookimpl
    def gradreg_shape_functions(self) -> dict[str, Callable[..., Any]]:
        return dict(self.shapes)

    @hookimpl
    def gradreg_kernels(self, backend: str) -> dict[str, Callable[..., Any]]:
        self.import_kernels()
        module = self.lazy_kernels.pop(backend, None)
        if module is not None:
            importlib.import_module(module)   # its decorators fill self.kernels[backend]
        return dict(self.kernels.get(backend, {}))

    @hookimpl
    def gradreg_gradients(self) -> dict[str, Callable[..., Any] | None]:
        self.import_rules()
        return dict(self.gradients)

    @hookimpl
    def gradreg_api_functions(self) -> dict[str, Any]:
        return {**self.api, **self._namespaced_builders()}

    @hookimpl
    def gradreg_iteration_sums(self) -> dict[str, Callable[..., Any]]:
        self.import_rules()
        return dict(self.iteration_sums)

    @hookimpl
    def gradreg_iteration_stacks(self) -> dict[str, Callable[..., Any]]:
        self.import_rules()
        return dict(self.iteration_stacks)

    @hookimpl
    def gradreg_loop_hoists(self) -> dict[str, Callable[..., Any]]:
        self.import_rules()
        return dict(self.loop_hoists)

    @hookimpl
    def gradreg_function_call(self) -> FunctionCall | None:
        self.import_rules()
        return self.calls

    @hookimpl
    def gradreg_cases(self) -> dict[str, list[Case]]:
        self.import_rules()
        return {op_type: list(found) for op_type, found in self.cases.items()}

    @hookimpl
    def gradreg_overrides(self) -> list[str]:
        return sorted(self.overrides)

    def __repr__(self) -> str:
        return f"<OpFamily {self.name}: {len(self.definitions)} ops>"


def _import_pending(modules: list[str]) -> None:
    """Import each module of ``modules``, emptying the list (a module is dropped before its
    import: one that fails is reported once, by the hook that asked, and not retried)."""
    while modules:
        importlib.import_module(modules.pop(0))


def _describe_rule(rule: Callable[..., Any] | None) -> str:
    """``module.qualname`` of a rule, for error messages ("not differentiable" for None)."""
    if rule is None:
        return "not differentiable"
    module = getattr(rule, "__module__", None) or "?"
    return f"{module}.{getattr(rule, '__qualname__', repr(rule))}"
