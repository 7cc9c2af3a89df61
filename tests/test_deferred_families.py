"""Deferred op families: a family whose op types share prefixes (the onnx family's ``onnx::``)
fills its tables only when a lookup names one of its op types or something lists them all, so
a process that never meets an ONNX op does not build its 227 definitions."""
from __future__ import annotations

import sys
import textwrap

import pytest

from gradreg.errors import PluginError
from gradreg.plugin import OpFamily
from gradreg.registry.plugins import PluginSource, Registry, entry_point_sources


@pytest.fixture
def deferred_family(tmp_path, monkeypatch):
    """A family 'late' with op types 'late::*', completed by a module written to tmp_path."""
    package = tmp_path / "late_family"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent('''
        from gradreg.plugin import OpFamily
        family = OpFamily("late", deferred=("late::",), complete="late_family.complete")
    '''))
    (package / "complete.py").write_text(textwrap.dedent('''
        import numpy as np
        from late_family import family
        COMPLETED = True
        family.op("late::Double", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float, double}"])
        family.simple_kernel("late::Double", lambda x: x * 2)
        family.gradients["late::Double"] = lambda op, grad: [grad * 2]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("late_family")]:
        monkeypatch.delitem(sys.modules, name)
    import late_family
    yield late_family.family
    for name in [m for m in sys.modules if m.startswith("late_family")]:
        monkeypatch.delitem(sys.modules, name)


def _registry(family):
    builtin = [s for s in entry_point_sources() if s.name in ("array", "math")]
    return Registry(builtin + [PluginSource("late", lambda: family)])


def test_a_deferred_family_is_completed_by_a_lookup_of_its_op_type(deferred_family):
    registry = _registry(deferred_family)
    numpy_kernels = registry.kernels("numpy")     # a kernel table built before completion
    assert "late_family.complete" not in sys.modules
    assert registry.op_definition("Add") is not None and registry.gradients.lookup("Add") is not None
    assert registry.op_definition("late::Missing") is None        # names the prefix: completes
    assert "late_family.complete" in sys.modules
    assert registry.op_definition("late::Double").plugin == "late"
    assert registry.kernel_factory("late::Double") is not None
    assert numpy_kernels.lookup("late::Double") is not None
    assert registry.gradients.lookup("late::Double").plugin == "late"
    assert "late::Double" in registry.plugins["late"].provides["op"]


def test_listing_every_op_type_completes_it(deferred_family):
    registry = _registry(deferred_family)
    assert "late_family.complete" not in sys.modules
    assert "late::Double" in sorted(registry.ops)


def test_a_family_added_at_run_time_is_read_whole(deferred_family):
    registry = Registry([s for s in entry_point_sources() if s.name == "array"])
    registry.add_plugin(PluginSource("late", lambda: deferred_family))
    assert registry.op_definition("late::Double") is not None


def test_a_completion_that_fails_is_a_plugin_failure_not_a_crash(tmp_path, monkeypatch):
    family = OpFamily("broken", deferred=("broken::",), complete="no_such_module_for_gradreg_tests")
    with pytest.warns(Warning, match="broken"):
        registry = Registry([PluginSource("broken", lambda: family)])
        assert registry.op_definition("broken::X") is None
    assert registry.plugins["broken"].errors


def test_deferred_prefixes_need_their_module():
    with pytest.raises(PluginError, match="completes"):
        OpFamily("incomplete", deferred=("x::",))


def test_the_onnx_family_waits_for_an_onnx_op_type():
    import gradreg_plugins.onnx as onnx_family
    from gradreg_plugins.onnx.schema_table import NAMESPACES

    # its prefixes are exactly the namespaces its op types use
    assert sorted(onnx_family.NAMESPACE_PREFIXES) == sorted(f"{ns}::" for ns in NAMESPACES.values())
    registry = Registry(entry_point_sources())
    assert "onnx" in registry._deferred
    registry.op_definition("MatMul")
    registry.kernels("numpy").lookup("Conv2D")
    assert "onnx" in registry._deferred
    assert registry.op_definition("onnx::Conv") is not None
    assert "onnx" not in registry._deferred
    assert registry.kernel_factory("onnx::Conv") is not None
