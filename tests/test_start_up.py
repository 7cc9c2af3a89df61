"""What a command imports at start-up (issue 14: `gradreg inspect` of a small graph <= 0.5 s).

`gradreg inspect` reads a graph and its op definitions; it must not import what only other
commands need: differentiation's and training's modules, sessions, SavedModel loading, the
renderers, optree, ml_dtypes, importlib.metadata. ``import gradreg`` defers those names to
first use (gradreg/__init__.py's _LAZY), with the same objects an eager import gave.
"""
from __future__ import annotations

import ast
import importlib
import json
import pathlib
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import gradreg
from gradreg.errors import OpDefinitionError, PluginError
from gradreg.registry import discovery

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mlp" / "model.pbtxt"

NOT_FOR_INSPECT = ["gradreg.cli_commands", "gradreg.training", "gradreg.runtime.session",
                   "gradreg.formats.saved_model_loader", "gradreg.viz.render", "gradreg.viz.tensorboard",
                   "optree", "ml_dtypes", "importlib.metadata", "secrets",
                   # the backends' plan compilers, differentiation, the families' gradient modules,
                   # SavedModel reading, the thread pool's executor
                   "gradreg.runtime.plan", "gradreg.backends.numba.grouping", "gradreg.autodiff.gradients",
                   "gradreg_plugins.array.grads", "gradreg_plugins.sparse.grads",
                   "gradreg_plugins.control_flow.grads", "gradreg.formats.saved_model", "concurrent.futures"]


def _run(script: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_inspect_imports_only_what_reading_a_graph_needs():
    report = _run(f"""
        import contextlib, io, json, sys
        from gradreg.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["inspect", {str(EXAMPLE)!r}])
        print(json.dumps({{"code": code, "out": out.getvalue(),
                          "loaded": [m for m in {NOT_FOR_INSPECT!r} if m in sys.modules]}}))
    """)
    assert report["code"] == 0
    assert "nodes: 44" in report["out"] and "loss:0  float32 []" in report["out"]
    assert report["loaded"] == []


def test_other_commands_still_get_their_modules():
    report = _run(f"""
        import contextlib, io, json, sys
        from gradreg.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["run", {str(EXAMPLE)!r}, "--feed", "x=" + str([[0.5] * 12] * 8),
                         "--feed", "labels=" + str([[0.2] * 5] * 8), "--fetch", "loss"])
        print(json.dumps({{"code": code, "out": out.getvalue(),
                          "loaded": [m for m in ("gradreg.cli_commands", "gradreg.runtime.session")
                                     if m in sys.modules]}}))
    """)
    assert report["code"] == 0 and report["out"].startswith("loss:0")
    assert report["loaded"] == ["gradreg.cli_commands", "gradreg.runtime.session"]


def _type_checking_imports() -> dict[str, tuple[str, str | None]]:
    """name -> (module, attribute or None for a module) of gradreg/__init__.py's TYPE_CHECKING block."""
    tree = ast.parse((ROOT / "gradreg" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    names: dict[str, tuple[str, str | None]] = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                value = getattr(importlib.import_module(node.module), alias.name)
                is_module = isinstance(value, types.ModuleType)
                names[alias.asname or alias.name] = ((f"{node.module}.{alias.name}", None) if is_module
                                                     else (node.module, alias.name))
    return names


def test_lazy_names_are_the_type_checking_imports_and_resolve_to_the_same_objects():
    declared = _type_checking_imports()
    lazy = dict(gradreg._LAZY)
    assert lazy.pop("tuple") == ("gradreg.build.control_flow", "tuple_")   # TensorFlow's spelling
    assert lazy == declared
    for name, (module, attribute) in declared.items():
        target = importlib.import_module(module)
        assert getattr(gradreg, name) is (target if attribute is None else getattr(target, attribute)), name
    assert gradreg.tuple is importlib.import_module("gradreg.build.control_flow").tuple_
    missing = [name for name in gradreg.__all__ if not hasattr(gradreg, name)]
    assert missing == []
    assert set(gradreg._LAZY) <= set(dir(gradreg))


def test_version_is_read_when_asked_for():
    import importlib.metadata
    assert gradreg.__version__ == importlib.metadata.version("gradreg")


def test_ml_dtypes_types_resolve_when_first_used():
    report = _run("""
        import json, sys
        import numpy as np
        from gradreg.model import dtypes
        before = "ml_dtypes" in sys.modules
        storage = str(dtypes.as_dtype("int4").storage)            # the storage first
        import ml_dtypes
        back = dtypes.as_dtype(np.dtype(ml_dtypes.float8_e4m3fn)).name
        ref = str(dtypes.as_dtype("float8_e5m2_ref").storage)
        print(json.dumps({"before": before, "storage": storage, "back": back, "ref": ref}))
    """)
    assert report == {"before": False, "storage": "int4", "back": "float8_e4m3fn", "ref": "float8_e5m2"}
    report = _run("""
        import json
        import ml_dtypes, numpy as np
        from gradreg.model import dtypes
        print(json.dumps(dtypes.as_dtype(np.zeros(2, ml_dtypes.uint4).dtype).name))   # the array first
    """)
    assert report == "uint4"


# -- the registry's seams: rule tables read when first used, families' rules modules --------

def test_a_familys_kernel_and_gradient_modules_define_no_op_shape_or_builder():
    # Each table as the registry first builds it (kernels before gradients, as constant folding
    # does when a graph loads), and again once everything is imported: the same entries.
    report = _run("""
        import json
        from gradreg.registry import get_registry
        registry = get_registry()
        rows = lambda table: sorted([key, table.provider(key)] for key in table._entries)
        first = {"ops": rows(registry.ops), "shapes": rows(registry.shapes), "api": rows(registry.api),
                 "numpy": rows(registry.kernels("numpy")), "numba": rows(registry.kernels("numba"))}
        registry.complete_all()
        registry.ops._entries = {k: v for k, v in registry.ops._entries.items() if "::" not in k}   # onnx's
        registry.shapes._entries = {k: v for k, v in registry.shapes._entries.items() if "::" not in k}
        again = {"ops": rows(registry.ops), "shapes": rows(registry.shapes), "api": rows(registry.api),
                 "numpy": [r for r in rows(registry.kernels("numpy")) if "::" not in r[0]],
                 "numba": [r for r in rows(registry.kernels("numba")) if "::" not in r[0]]}
        print(json.dumps({"same": {k: first[k] == again[k] for k in first},
                          "sizes": {k: len(v) for k, v in first.items()},
                          "gradients": len(registry.gradients.keys())}))
    """)
    assert report["same"] == {"ops": True, "shapes": True, "api": True, "numpy": True, "numba": True}
    assert report["sizes"]["ops"] > 500 and report["sizes"]["numpy"] > 500 and report["gradients"] > 700


def test_every_registered_op_definition_parses():
    # Definitions parse their argument and attr strings when first read (start-up).
    from gradreg.model.opdefs import OpDefinition
    from gradreg.registry import get_registry
    registry = get_registry()
    registry.complete_all()
    definitions = [registry.op_definition(op_type) for op_type in registry.ops]
    assert len(definitions) > 700
    for definition in definitions:
        assert definition is not None
        assert len(definition.op_def.input_arg) == len(definition.input_args), definition.name
        assert set(definition.attr_specs) == {a.name for a in definition.op_def.attr}, definition.name
    bad = OpDefinition("Bad", inputs=["x: Q"], attrs=["T: type"])      # accepted until read
    with pytest.raises(OpDefinitionError, match="op Bad: argument 'x: Q'"):
        _ = bad.input_args


def test_rule_tables_fill_on_first_use_once_and_for_every_thread():
    import threading

    from gradreg.registry import Registry, entry_point_sources
    registry = Registry(entry_point_sources())
    assert registry._rules_state == "empty"
    results: list[tuple[str, int]] = []

    def read() -> None:
        results.append((registry.gradients.lookup("MatMul").plugin, len(registry.gradients.keys())))
    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and len(set(results)) == 1
    plugin, count = results[0]
    assert plugin == "math" and count > 700
    assert registry._rules_state == "filled"
    assert registry.iteration_sums.keys() and registry.function_call() is not None


def test_a_gradient_registered_from_python_before_first_use_is_not_replaced_by_the_plugins():
    from gradreg.registry import Registry, entry_point_sources
    registry = Registry(entry_point_sources())

    def mine(op, grad):
        return grad
    registry.register_gradient("Relu", mine, "my-code", override=True)
    assert registry.gradients.lookup("Relu").value is mine
    assert registry.gradients.lookup("Relu").plugin == "my-code"


def test_the_registrys_plugin_manager_finds_the_hooks_pluggy_finds():
    import pluggy

    from gradreg.registry import hookspecs
    from gradreg.registry.hookspecs import hookimpl
    from gradreg.registry.plugins import _PluginManager

    class Base:
        @hookimpl
        def gradreg_gradients(self):
            return {}

    class Derived(Base):
        @staticmethod
        @hookimpl
        def gradreg_op_definitions():
            return []

        @classmethod
        @hookimpl
        def gradreg_shape_functions(cls):
            return {}

        @hookimpl(specname="gradreg_overrides")
        def named_otherwise(self):
            return []

        @property
        def gradreg_kernels(self):   # a descriptor: neither manager evaluates it
            raise AssertionError("evaluated")

    instance = Derived()
    instance.gradreg_api_functions = hookimpl(lambda: {})     # a function in the instance's dict
    module = types.ModuleType("demo_plugin")
    module.gradreg_backends = hookimpl(lambda: [])
    module.helper = lambda: None
    from gradreg.registry.plugins import entry_point_sources
    installed = [source.load() for source in entry_point_sources()]

    def found(manager_type, plugin):
        manager = manager_type(hookspecs.PROJECT)
        manager.add_hookspecs(hookspecs)
        manager.register(plugin, name="p")
        return sorted((caller.name, impl.function.__name__) for caller in manager.hook.__dict__.values()
                      if isinstance(caller, pluggy.HookCaller) for impl in caller.get_hookimpls())
    for plugin in [instance, Derived, module, *installed]:
        assert found(_PluginManager, plugin) == found(pluggy.PluginManager, plugin), plugin
    assert ("gradreg_overrides", "named_otherwise") in found(_PluginManager, instance)


# -- entry points ------------------------------------------------------------------------

def _distribution(site: pathlib.Path, dirname: str, name: str, version: str, entry_points: str) -> None:
    info = site / dirname
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA README.\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def _standard_finders(monkeypatch):
    """Only the standard finder on sys.meta_path (other tests may leave one that finds
    distributions of its own, which leaves discovery to importlib.metadata)."""
    from importlib.machinery import PathFinder
    monkeypatch.setattr(sys, "meta_path", [PathFinder])


def _as_rows(found: list[discovery.EntryPoint]) -> list[tuple[str, ...]]:
    return sorted((e.name, e.value, e.group, e.distribution, e.version) for e in found)


def test_discovery_agrees_with_importlib_metadata_here():
    # in a new interpreter: other tests leave sys.path entries, finders and caches behind
    report = _run("""
        import json
        from gradreg.registry import discovery
        rows = lambda found: sorted([e.name, e.value, e.group, e.distribution, e.version] for e in found)
        print(json.dumps({group: [rows(discovery._scan(group)), rows(discovery._from_importlib(group))]
                          for group in ("gradreg.plugins", "console_scripts", "pytest11")}))
    """)
    for group, (scanned, standard) in report.items():
        assert scanned == standard, group
    assert {row[0] for row in report["gradreg.plugins"][0]} >= {"array", "math", "nn", "onnx"}


def test_discovery_reads_dist_info_and_egg_info_as_importlib_does(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    _distribution(first, "Demo_Plugins-1.2.dist-info", "demo-plugins", "1.2", """
        # a comment
        [console_scripts]
        demo = demo.cli:main

        [demo.group]
        one = demo.one:family
        two = demo.two : thing.attr [extra]
    """)
    _distribution(second, "demo_plugins-0.9.dist-info", "demo-plugins", "0.9", """
        [demo.group]
        stale = demo.stale:family
    """)
    _distribution(second, "other.egg-info", "other", "3.0", """
        [demo.group]
        three = other.three
    """)
    (second / "plain-1.0.dist-info").mkdir()          # no entry points at all
    _standard_finders(monkeypatch)
    monkeypatch.setattr(sys, "path", [str(first), str(second), str(tmp_path / "missing")])
    scanned = discovery._scan("demo.group")
    # importlib.metadata's answer, from a new interpreter (in this one, other tests' use of it
    # leaves caches behind)
    standard = _run(f"""
        import importlib.metadata, json, sys
        from gradreg.registry import discovery
        sys.path[:] = {[str(first), str(second), str(tmp_path / "missing")]!r}
        print(json.dumps(sorted([e.name, e.value, e.group, e.distribution, e.version]
                                for e in discovery._from_importlib("demo.group"))))
    """)
    assert [list(row) for row in _as_rows(scanned)] == standard
    assert _as_rows(scanned) == [("one", "demo.one:family", "demo.group", "demo-plugins", "1.2"),
                                 ("three", "other.three", "demo.group", "other", "3.0"),
                                 ("two", "demo.two : thing.attr [extra]", "demo.group", "demo-plugins", "1.2")]


def test_an_entry_point_loads_its_object(tmp_path, monkeypatch):
    package = tmp_path / "demo_ep"
    package.mkdir()
    (package / "__init__.py").write_text("class Thing:\n    attr = 42\n")
    _distribution(tmp_path, "demo_ep-1.0.dist-info", "demo-ep", "1.0", """
        [demo.group]
        thing = demo_ep:Thing.attr
        module = demo_ep
    """)
    _standard_finders(monkeypatch)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    loaded = {e.name: e.load() for e in discovery.entry_points("demo.group")}
    assert loaded["thing"] == 42 and loaded["module"].Thing.attr == 42
    monkeypatch.delitem(sys.modules, "demo_ep")


def test_a_malformed_line_in_the_group_is_an_error_naming_the_file(tmp_path, monkeypatch):
    _distribution(tmp_path, "bad-1.0.dist-info", "bad", "1.0", """
        [other.group]
        ignored line without an equals sign
        [demo.group]
        no equals sign here
    """)
    _standard_finders(monkeypatch)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(PluginError, match=r"bad-1\.0\.dist-info.*no equals sign here"):
        discovery.entry_points("demo.group")


def test_a_zip_on_sys_path_leaves_discovery_to_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "packages.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))     # an empty zip archive
    _standard_finders(monkeypatch)
    monkeypatch.setattr(sys, "path", [str(archive), *sys.path])
    assert discovery._scan("gradreg.plugins") is None
    assert _as_rows(discovery.entry_points("gradreg.plugins")) == _as_rows(discovery._from_importlib("gradreg.plugins"))


def test_dtype_table_is_unchanged_by_lazy_ml_dtypes():
    import ml_dtypes
    for name in ("float8_e5m2", "float8_e4m3fn", "int4", "uint4", "float4_e2m1fn"):
        dtype = gradreg.dtypes.as_dtype(name)
        assert dtype.storage == np.dtype(getattr(ml_dtypes, name))
        assert gradreg.dtypes.as_dtype(dtype.storage) is dtype


def test_importlib_metadatas_failure_on_a_malformed_file_is_a_plugin_error(tmp_path):
    archive = tmp_path / "packages.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))
    _distribution(tmp_path, "bad-1.0.dist-info", "bad", "1.0", """
        [demo.group]
        no equals sign here
    """)
    report = _run(f"""
        import json, sys
        sys.path[:0] = {[str(archive), str(tmp_path)]!r}    # a zip: importlib.metadata reads them
        from gradreg.errors import OpDefinitionError, PluginError
        from gradreg.registry import discovery
        try:
            discovery.entry_points("demo.group")
            print(json.dumps("no error"))
        except PluginError as exc:
            print(json.dumps(str(exc)))
    """)
    assert "entry points" in report


def test_the_importlib_metadata_backports_finder_keeps_the_fast_scan(monkeypatch):
    backport = pytest.importorskip("importlib_metadata")
    finder = getattr(backport, "MetadataPathFinder", None)
    if finder is None:
        pytest.skip("this importlib_metadata has no MetadataPathFinder")
    from importlib.machinery import PathFinder
    monkeypatch.setattr(sys, "meta_path", [PathFinder, finder()])
    assert discovery._scan("gradreg.plugins") is not None

    class Other:
        def find_distributions(self, context=None):
            return iter(())
    monkeypatch.setattr(sys, "meta_path", [PathFinder, Other()])
    assert discovery._scan("gradreg.plugins") is None


# -- the console script's exit -------------------------------------------------------------

def _gradreg(prelude: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = f"{prelude}\nfrom gradreg.cli import entry\nentry()"
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=ROOT)


def test_a_read_only_command_prints_everything_and_keeps_its_exit_code():
    import contextlib
    import io

    from gradreg.cli import main
    expected = io.StringIO()
    with contextlib.redirect_stdout(expected):
        assert main(["inspect", str(EXAMPLE), "--nodes"]) == 0
    done = _gradreg("", "inspect", str(EXAMPLE), "--nodes")
    assert done.returncode == 0 and done.stdout == expected.getvalue() and "nodes: 44" in done.stdout
    missing = _gradreg("", "inspect", str(ROOT / "no-such-graph.pb"))
    assert missing.returncode == 1 and "no-such-graph.pb" in missing.stderr and missing.stdout == ""
    usage = _gradreg("", "inspect")
    assert usage.returncode == 2


def test_a_read_only_commands_exit_still_runs_atexit_callbacks_and_joins_threads():
    done = _gradreg("import atexit\natexit.register(lambda: print('atexit ran'))", "inspect", str(EXAMPLE))
    assert done.returncode == 0 and done.stdout.rstrip().endswith("atexit ran")
    threaded = _gradreg(textwrap.dedent("""
        import threading, time
        def late():
            time.sleep(0.5)
            print("thread finished", flush=True)
        threading.Thread(target=late).start()
    """), "inspect", str(EXAMPLE))
    # (the thread's line comes before or after inspect's output, as their timing falls)
    assert threaded.returncode == 0 and "thread finished" in threaded.stdout.splitlines()
    assert "nodes: 44" in threaded.stdout and "functions: none" in threaded.stdout
    ran = _gradreg("import atexit\natexit.register(lambda: print('atexit ran'))", "run", str(EXAMPLE),
                   "--feed", "x=" + str([[0.5] * 12] * 8), "--feed", "labels=" + str([[0.2] * 5] * 8),
                   "--fetch", "loss")
    assert ran.returncode == 0 and ran.stdout.startswith("loss:0") and ran.stdout.rstrip().endswith("atexit ran")
