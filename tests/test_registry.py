"""The plugin registry: discovery, provenance, conflicts, overrides, failing plugins."""
from __future__ import annotations

import pytest

import gradreg
from gradreg import hookimpl
from gradreg.errors import DuplicateRuleError, PluginError
from gradreg.plugin import OpFamily
from gradreg.registry import PluginSource, PluginWarning, Registry, get_registry


def _family(name, op_types=("Frob",), overrides=()):
    family = OpFamily(name, overrides=overrides)
    for op_type in op_types:
        family.op(op_type, inputs=["x: T"], outputs=["y: T"], attrs=["T: type"])
        family.gradient(op_type)(lambda op, grad, _name=name: grad)
        family.simple_kernel(op_type, lambda x: x)
    return family


def _source(name, obj):
    return PluginSource(name=name, load=lambda: obj, version="9.9", distribution=f"dist-{name}")


def test_builtin_families_load_through_entry_points():
    registry = get_registry()
    assert {"array", "math", "nn", "control_flow", "function_call"} <= set(registry.plugins)
    for name in ("array", "math", "nn", "control_flow", "function_call"):
        record = registry.plugins[name]
        assert record.loaded and not record.errors
        assert record.distribution == "gradreg" and record.target.startswith("gradreg_plugins.")


def test_every_entry_knows_its_plugin():
    registry = get_registry()
    assert registry.ops.lookup("MatMul").plugin == "math"
    assert registry.ops.lookup("Reshape").plugin == "array"
    assert registry.ops.lookup("Conv2D").plugin == "nn"
    assert registry.ops.lookup("Merge").plugin == "control_flow"
    assert registry.kernels("numpy").lookup("PartitionedCall").plugin == "function_call"


def test_two_plugins_claiming_one_op_type_is_an_error_naming_both():
    registry = Registry([_source("alpha", _family("alpha")), _source("beta", _family("beta"))])
    with pytest.raises(PluginError, match="plugins 'alpha' and 'beta' both provide the op definition of 'Frob'"):
        registry.op_definition("Frob")
    with pytest.raises(PluginError, match="'alpha' and 'beta'.*gradient of 'Frob'"):
        registry.gradients.lookup("Frob")
    assert registry.conflicts()["op definition"] == {"Frob": ["alpha", "beta"]}


@pytest.mark.parametrize("order", [("alpha", "beta"), ("beta", "alpha")])
def test_a_declared_override_wins_in_either_load_order(order):
    families = {"alpha": _family("alpha"), "beta": _family("beta", overrides=["Frob"])}
    registry = Registry([_source(name, families[name]) for name in order])
    assert registry.ops.lookup("Frob").plugin == "beta"
    assert registry.gradients.lookup("Frob").plugin == "beta"
    assert not registry.conflicts()


@pytest.mark.parametrize("order", [("alpha", "beta", "gamma"), ("gamma", "beta", "alpha"), ("beta", "gamma", "alpha")])
def test_several_declared_overrides_resolve_to_the_first_by_name_and_say_so(order):
    families = {name: _family(name, overrides=["Frob"]) for name in ("alpha", "beta", "gamma")}
    registry = Registry([_source(name, families[name]) for name in order])
    with pytest.warns(PluginWarning, match="override the op definition of 'Frob': 'alpha' is used") as warned:
        assert registry.ops.lookup("Frob").plugin == "alpha"
        assert registry.ops.lookup("Frob").plugin == "alpha"
    assert len(warned) == 1    # once per entry
    with pytest.warns(PluginWarning, match="'alpha' and 'beta' and 'gamma' all override the gradient of 'Frob'"):
        assert registry.gradients.lookup("Frob").plugin == "alpha"
    assert registry.resolved_conflicts()["gradient"] == {"Frob": ("alpha", ["beta", "gamma"])}
    assert not registry.conflicts()


def test_removing_an_overriding_plugin_puts_the_overridden_entry_back():
    registry = Registry([_source("alpha", _family("alpha"))])
    registry.add_plugin(_source("beta", _family("beta", overrides=["Frob"])))
    assert registry.gradients.lookup("Frob").plugin == "beta"
    registry.remove_plugin("beta")
    assert registry.gradients.lookup("Frob").plugin == "alpha"
    assert registry.ops.lookup("Frob").plugin == "alpha"


def test_gradreg_plugins_lists_a_resolved_conflict(capsys, monkeypatch):
    from gradreg import cli_ops
    families = {name: _family(name, overrides=["Frob"]) for name in ("alpha", "beta")}
    registry = Registry([_source(name, family) for name, family in families.items()])
    monkeypatch.setattr(cli_ops, "get_registry", lambda: registry)
    assert gradreg.cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "RESOLVED: gradient of 'Frob': 'alpha' is used over 'beta' (all declare the override; the first by " \
           "name wins)" in out
    assert gradreg.cli.main(["plugins", "--json"]) == 0
    import json
    assert json.loads(capsys.readouterr().out)["resolved"]["gradient"] == {"Frob": {"used": "alpha", "over": ["beta"]}}


def test_a_plugin_that_fails_to_import_is_reported_and_the_others_load():
    def broken():
        raise ImportError("No module named 'missing_dependency'")
    with pytest.warns(PluginWarning, match="plugin 'broken' failed"):
        registry = Registry([PluginSource("broken", broken), _source("good", _family("good"))])
    assert registry.plugins["broken"].errors == ["load: ImportError: No module named 'missing_dependency'"]
    assert registry.ops.lookup("Frob").plugin == "good"


def test_a_plugin_whose_hook_raises_is_reported_and_the_others_load():
    class Faulty:
        @hookimpl
        def gradreg_gradients(self):
            raise RuntimeError("boom")

        @hookimpl
        def gradreg_op_definitions(self):
            return []
    registry = Registry([_source("faulty", Faulty()), _source("good", _family("good"))])
    assert registry.ops.lookup("Frob").plugin == "good"
    # The rule tables are read when first used (start-up): the failure is reported then.
    with pytest.warns(PluginWarning, match="plugin 'faulty' failed \\(gradreg_gradients\\): RuntimeError: boom"):
        assert registry.gradients.lookup("Frob").plugin == "good"
    assert any("gradreg_gradients" in e for e in registry.plugins["faulty"].errors)


def test_plain_module_style_hooks_work():
    class Module:
        @staticmethod
        @hookimpl
        def gradreg_gradients():
            return {"Zap": None}
    registry = Registry([_source("mod", Module)])
    entry = registry.gradients.lookup("Zap")
    assert entry.value is None and entry.plugin == "mod"


def test_register_gradient_refuses_to_replace_silently():
    def first(op, grad):
        return grad

    def second(op, grad):
        return grad * 2
    second.__module__ = "another_module"
    gradreg.RegisterGradient("TestRegistryOnce")(first)
    gradreg.RegisterGradient("TestRegistryOnce")(first)   # the same module registering again is fine
    with pytest.raises(PluginError, match="already registered by 'python:test_registry'"):
        gradreg.RegisterGradient("TestRegistryOnce")(second)
    gradreg.RegisterGradient("TestRegistryOnce", override=True)(second)
    assert get_registry().gradients.lookup("TestRegistryOnce").plugin == "python:another_module"


def test_register_gradient_refuses_to_replace_a_plugins_rule():
    with pytest.raises(PluginError, match="already registered by 'array'"):
        gradreg.RegisterGradient("Identity")(lambda op, grad: grad)


def test_a_family_registers_one_rule_for_several_op_types():
    family = OpFamily("several")

    @family.gradient("Frob", "Frobnicate")
    def rule(op, grad):
        return grad

    assert family.gradients == {"Frob": rule, "Frobnicate": rule}


def test_a_second_rule_for_an_op_type_of_the_same_family_is_an_error_naming_both():
    family = OpFamily("twice")

    @family.gradient("Frob")
    def first(op, grad):
        return grad

    def second(op, grad):
        return grad * 2

    with pytest.raises(DuplicateRuleError, match=r"op family 'twice': a gradient for 'Frob' is already registered "
                       r"\(test_registry\..*first\); registering test_registry\..*second too needs override=True"):
        family.gradient("Frob")(second)
    assert family.gradients["Frob"] is first
    with pytest.raises(DuplicateRuleError, match="'Frob'.*not differentiable"):
        family.not_differentiable("Frob")
    family.gradient("Frob", override=True)(second)
    assert family.gradients["Frob"] is second


def test_a_rule_for_an_op_type_declared_not_differentiable_is_an_error():
    family = OpFamily("flat")
    family.not_differentiable("Floor")
    with pytest.raises(DuplicateRuleError, match="'Floor' is already registered \\(not differentiable\\)"):
        family.gradient("Floor")(lambda op, grad: grad)
    assert family.gradients == {"Floor": None}


def test_separate_plugins_with_a_rule_each_still_resolve_by_name_not_by_the_duplicate_error():
    # The duplicate error is within one family; two plugins providing one op type stay a conflict
    # the registry reports (or resolves by declared overrides, first by name).
    families = {"alpha": _family("alpha", overrides=["Frob"]), "beta": _family("beta", overrides=["Frob"])}
    with pytest.warns(PluginWarning):
        registry = Registry([_source(name, f) for name, f in families.items()])
        assert registry.gradients.lookup("Frob").plugin == "alpha"


def test_numba_kernels_load_lazily():
    registry = Registry([_source("good", _family("good"))])
    assert "numba" not in registry._kernels
    registry.kernels("numba")
    assert "numba" in registry._kernels


def test_a_shape_memo_keeps_what_it_made_drops_all_past_its_size_and_never_keeps_a_failure():
    from gradreg.registry.kernels import ShapeMemo
    memo = ShapeMemo(size=2)
    made = []

    def make(key):
        made.append(key)
        return ("value", key)

    assert memo.get((3, 4), lambda: make((3, 4))) == ("value", (3, 4))
    assert memo.get((3, 4), lambda: make((3, 4))) == ("value", (3, 4))
    assert memo.get((5,), lambda: make((5,))) == ("value", (5,))
    assert made == [(3, 4), (5,)]
    assert memo.get((6,), lambda: make((6,))) == ("value", (6,))     # a third key: the others go
    assert memo.get((3, 4), lambda: make((3, 4))) == ("value", (3, 4))
    assert made == [(3, 4), (5,), (6,), (3, 4)]

    def refuse():
        made.append("refused")
        raise ValueError("bad shape")

    for _ in range(2):
        with pytest.raises(ValueError, match="bad shape"):
            memo.get((7,), refuse)
    assert made[-2:] == ["refused", "refused"]
