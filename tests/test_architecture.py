"""The layers of gradreg/ (CONTRIBUTING.md draws the map), checked over the import graph.

Each module of gradreg/ belongs to a layer; a module imports only from its own layer or
lower ones — imports inside functions included. The import graph has no cycle. At most
``MAX_FUNCTION_IMPORTS`` imports of gradreg's own modules sit inside functions, each with a
comment saying why (an optional dependency, start-up cost). Built-in and example plugins
import gradreg only through public modules and names.

The graph is read from the source (ast), so the check sees every import, including the
ones a test run never executes.
"""
from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gradreg"

# Bottom to top. A module's layer is the one of its longest matching prefix.
LAYERS: list[tuple[str, ...]] = [
    ("gradreg.errors", "gradreg.config", "gradreg.deadline", "gradreg.progress", "gradreg.proto",
     "gradreg.file_access"),
    ("gradreg.model",),
    ("gradreg.registry",),
    ("gradreg.build",),
    ("gradreg.autodiff",),
    ("gradreg.runtime", "gradreg.backends"),
    ("gradreg.training", "gradreg.formats"),
    ("gradreg", "gradreg.cli", "gradreg.plugin", "gradreg.testing", "gradreg.__main__"),
]
# Imports forbidden within a layer: the runtime knows backends only through the registry.
FORBIDDEN_WITHIN_LAYER = [("gradreg.runtime", "gradreg.backends")]
MAX_FUNCTION_IMPORTS = 11


@dataclass(frozen=True)
class Import:
    source: str        # importing module
    target: str        # imported gradreg module
    line: int
    in_function: bool
    type_only: bool    # under ``if TYPE_CHECKING:``
    comment: str       # comment on the import's line or the line above


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: pathlib.Path, root: pathlib.Path) -> dict[str, pathlib.Path]:
    return {module_name(p, root): p for p in sorted(package.rglob("*.py"))}


MODULES = _modules(PACKAGE, ROOT)


def _resolve(name: str, imported: str | None) -> str | None:
    """The gradreg module an import statement names (``from a import b``: ``a.b`` when that is a
    module, else ``a``); None for anything outside gradreg."""
    if name != "gradreg" and not name.startswith("gradreg."):
        return None
    if imported is not None and f"{name}.{imported}" in MODULES:
        return f"{name}.{imported}"
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _ImportCollector(ast.NodeVisitor):
    """The gradreg imports of one module: where, inside a function or not, TYPE_CHECKING-only or not."""

    def __init__(self, path: pathlib.Path, source_module: str):
        self.path = path
        self.source = source_module
        self.lines = path.read_text().splitlines()
        self.found: list[Import] = []
        self.in_function = False
        self.type_only = False

    def comment_at(self, line: int) -> str:
        here = self.lines[line - 1]
        above = self.lines[line - 2].strip() if line >= 2 else ""
        parts = [here.split("#", 1)[1] if "#" in here else "", above[1:] if above.startswith("#") else ""]
        return " ".join(p.strip() for p in parts if p.strip())

    def add(self, target: str | None, line: int) -> None:
        if target is not None:
            self.found.append(Import(self.source, target, line, self.in_function, self.type_only,
                                     self.comment_at(line)))

    def visit_function(self, node: ast.AST) -> None:
        saved, self.in_function = self.in_function, True
        self.generic_visit(node)
        self.in_function = saved

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_function  # noqa: N815  (ast.NodeVisitor's names)

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        saved, self.type_only = self.type_only, True
        for stmt in node.body:
            self.visit(stmt)
        self.type_only = saved
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(_resolve(alias.name, None), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            raise AssertionError(f"{self.path}:{node.lineno}: use absolute imports")
        for alias in node.names:
            self.add(_resolve(node.module or "", alias.name), node.lineno)


def imports_of(path: pathlib.Path, source_module: str) -> list[Import]:
    collector = _ImportCollector(path, source_module)
    collector.visit(ast.parse(path.read_text()))
    return collector.found


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise AssertionError(f"module {module} is in no layer: add it to LAYERS (and to CONTRIBUTING.md)")
    return best


def _all_imports() -> list[Import]:
    return [imp for module, path in MODULES.items() for imp in imports_of(path, module)]


IMPORTS = _all_imports()


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_from_a_higher_layer():
    upward = [f"{imp.source} (layer {layer_of(imp.source)}) imports {imp.target} (layer {layer_of(imp.target)}) "
              f"at line {imp.line}" for imp in IMPORTS if layer_of(imp.target) > layer_of(imp.source)]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_forbidden_imports_within_a_layer():
    bad = [f"{imp.source} imports {imp.target} at line {imp.line}" for imp in IMPORTS
           for low, high in FORBIDDEN_WITHIN_LAYER if _within(imp.source, low) and _within(imp.target, high)]
    assert not bad, "\n".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_the_import_graph_has_no_cycle():
    edges: dict[str, set[str]] = {}
    for imp in IMPORTS:
        # A package's __init__ runs before its modules: an import of the parent package by one of
        # its own modules is not an edge of the import order.
        if not imp.type_only and imp.target != imp.source and not _within(imp.source, imp.target):
            edges.setdefault(imp.source, set()).add(imp.target)
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_few_imports_inside_functions_each_with_its_reason():
    inside = [imp for imp in IMPORTS if imp.in_function and not imp.type_only]
    listing = "\n".join(f"{imp.source}:{imp.line} imports {imp.target}" for imp in inside)
    assert len(inside) <= MAX_FUNCTION_IMPORTS, (
        f"{len(inside)} imports of gradreg modules inside functions (at most {MAX_FUNCTION_IMPORTS}):\n{listing}")
    unexplained = [imp for imp in inside if not imp.comment]
    assert not unexplained, "imports inside functions need a comment giving the reason:\n" + "\n".join(
        f"{imp.source}:{imp.line}" for imp in unexplained)


# -- plugins -------------------------------------------------------------------------------------

PLUGIN_SOURCES = sorted((ROOT / "plugins" / "gradreg_plugins").rglob("*.py")) + sorted(
    (ROOT / "plugins" / "gradreg-swish" / "gradreg_swish").rglob("*.py"))


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_use_only_public_gradreg_modules_and_names(path):
    problems = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[tuple[str, str | None]] = []
        if isinstance(node, ast.Import):
            names = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [(node.module, alias.name) for alias in node.names]
        for module, name in names:
            if module.split(".")[0] != "gradreg":
                continue
            if any(part.startswith("_") for part in module.split(".")) or (name or "").startswith("_"):
                problems.append(f"line {node.lineno}: {module} {name or ''}".strip())
            elif _resolve(module, name) not in MODULES:
                problems.append(f"line {node.lineno}: {module} is not a gradreg module")
    assert not problems, f"{path.name} reaches into gradreg's private names:\n" + "\n".join(problems)


def _gradreg_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) of each gradreg module ``path`` imports (``from a import b``: a.b if a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, _resolve(alias.name, None)) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.extend((node.lineno, _resolve(node.module, alias.name)) for alias in node.names)
    return [(line, module) for line, module in found if module is not None]


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_reach_the_backends_only_through_kernel_support(path):
    # Threads, BLAS counts, compiled-loop helpers: gradreg.kernel_support; a backend's records:
    # gradreg.plugin / gradreg.registry. A backend may then change its own modules freely.
    found = [f"line {line}: {module}" for line, module in _gradreg_imports(path)
             if module == "gradreg.backends" or module.startswith("gradreg.backends.")]
    assert not found, f"{path.relative_to(ROOT)} imports a backend's own modules (use gradreg.kernel_support):\n" \
        + "\n".join(found)


def test_the_backend_check_sees_an_import_of_a_backend_module(tmp_path):
    source = tmp_path / "kernels.py"
    source.write_text("from gradreg.backends import threads\nimport gradreg.backends.numba.codegen\n"
                      "from gradreg.kernel_support import parallel\n")
    assert _gradreg_imports(source) == [(1, "gradreg.backends.threads"), (2, "gradreg.backends.numba.codegen"),
                                        (3, "gradreg.kernel_support")]


# -- encapsulation -------------------------------------------------------------------------------

def _own_members(tree: ast.Module) -> set[str]:
    """Names a module defines on its own classes: methods, class attributes, __slots__ entries and
    attributes assigned on ``self``/``cls`` (a module may use those on any instance of its classes)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
                    if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets) and item.value:
                        names.update(c.value for c in ast.walk(item.value)
                                     if isinstance(c, ast.Constant) and isinstance(c.value, str))
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
    return names


# Names with an underscore that are another library's public interface: NumPy's C API table (the
# capsule a C extension's import_array reads; the plan allocator takes PyDataMem_SetHandler from it).
PUBLIC_INTERFACES = {"_ARRAY_API"}


def _is_private(name: str) -> bool:
    # _gradreg_tensor_ and friends are conversion protocols (like __array__), not private names.
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_INTERFACES and not (
        name.startswith("_gradreg_") and name.endswith("_"))


def foreign_private_uses(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    own = _own_members(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr not in own:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in
              ("getattr", "setattr", "hasattr") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _is_private(node.args[1].value)):
            found.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("gradreg", "gradreg_plugins"):
            found.extend(f"line {node.lineno}: import {a.name}" for a in node.names if _is_private(a.name))
    return found


ENCAPSULATED = [p for p in sorted(PACKAGE.rglob("*.py")) if "proto" not in p.parts] + PLUGIN_SOURCES


@pytest.mark.parametrize("path", ENCAPSULATED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_uses_another_modules_private_names(path):
    found = foreign_private_uses(path)
    assert not found, f"{path.relative_to(ROOT)} uses private names it does not define:\n" + "\n".join(found)


# -- the core and the families ------------------------------------------------------------------------
# Each check below is a function of a source tree, run on the real one and, in the negative tests at
# the end, on a small synthetic tree holding the finding it guards against (so it can fail).

PLUGINS = ROOT / "plugins"
PLUGIN_PACKAGE = "gradreg_plugins"
# Imports inside functions, over every module of plugins/gradreg_plugins/ (a group of consecutive
# import statements counts once): an optional dependency or start-up time, each said in a comment.
MAX_PLUGIN_FUNCTION_IMPORTS = 12


def core_imports_of_plugins(package: pathlib.Path, root: pathlib.Path) -> list[str]:
    """``path:line imports name`` for each import of a gradreg_plugins module under ``package``
    (imports inside functions and under TYPE_CHECKING too)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(root)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] == PLUGIN_PACKAGE]
    return found


def test_the_core_imports_no_plugin():
    """gradreg/ finds plugins through entry points; it never names one (imports inside functions too)."""
    found = core_imports_of_plugins(PACKAGE, ROOT)
    assert not found, "the core imports plugins:\n" + "\n".join(found)


@dataclass(frozen=True)
class PluginImport:
    source: str        # importing module, gradreg_plugins.<family>.<module>
    target: str        # the gradreg_plugins module it names (``from a import b``: a.b when that is a module)
    line: int
    in_function: bool
    type_only: bool    # under ``if TYPE_CHECKING:``


def plugin_modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    return _modules(root / PLUGIN_PACKAGE, root)


def plugin_imports(root: pathlib.Path) -> list[PluginImport]:
    """Every import of a gradreg_plugins module by a module of ``root``/gradreg_plugins."""
    modules = plugin_modules(root)
    out: list[PluginImport] = []

    def resolve(name: str, imported: str | None) -> str | None:
        if name.split(".")[0] != PLUGIN_PACKAGE:
            return None
        if imported is not None and f"{name}.{imported}" in modules:
            return f"{name}.{imported}"
        return name

    def walk(node: ast.AST, source: str, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            only = type_only or (isinstance(child, ast.If) and _is_type_checking(child.test))
            if isinstance(child, ast.Import):
                out.extend(PluginImport(source, t, child.lineno, in_function, type_only) for a in child.names
                           if (t := resolve(a.name, None)) is not None)
            elif isinstance(child, ast.ImportFrom):
                out.extend(PluginImport(source, t, child.lineno, in_function, type_only) for a in child.names
                           if (t := resolve(child.module or "", a.name)) is not None)
            walk(child, source, inside, only)

    for module, path in modules.items():
        walk(ast.parse(path.read_text()), module, False, False)
    return out


def plugin_cycles(root: pathlib.Path) -> list[list[str]]:
    """The import cycles among the modules of ``root``/gradreg_plugins (TYPE_CHECKING-only imports
    aside; a module importing its own package is not an edge: the package runs first)."""
    edges: dict[str, set[str]] = {}
    for imp in plugin_imports(root):
        if not imp.type_only and imp.target != imp.source and not _within(imp.source, imp.target):
            edges.setdefault(imp.source, set()).add(imp.target)
    return _cycles(edges)


def test_the_plugins_have_no_import_cycle():
    cycles = plugin_cycles(PLUGINS)
    assert not cycles, "import cycles in plugins/:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _function_import_groups(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, comment) of each group of consecutive import statements inside a function of a module
    (an optional dependency imported as ``import onnx`` then ``from onnx import helper`` is one group,
    explained once)."""
    lines = path.read_text().splitlines()
    groups = []

    def comment(line: int) -> str:
        here, above = lines[line - 1], lines[line - 2].strip() if line >= 2 else ""
        return (here.split("#", 1)[1] if "#" in here else "") + (above[1:] if above.startswith("#") else "")

    def walk(node: ast.AST, in_function: bool) -> None:
        body = getattr(node, "body", None)
        if in_function and isinstance(body, list):
            previous_was_import = False
            for stmt in body:
                is_import = isinstance(stmt, (ast.Import, ast.ImportFrom))
                if is_import and not previous_was_import:
                    groups.append((stmt.lineno, comment(stmt.lineno).strip()))
                previous_was_import = is_import
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                continue
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(ast.parse(path.read_text()), False)
    return groups


def function_import_problems(root: pathlib.Path, cap: int) -> list[str]:
    """What is wrong with the imports inside functions of ``root``/gradreg_plugins: more groups
    than ``cap`` (listing them), and each group without a comment giving its reason."""
    groups = [(path, line, why) for path in plugin_modules(root).values()
              for line, why in _function_import_groups(path)]
    problems = []
    if len(groups) > cap:
        problems.append(f"{len(groups)} groups of imports inside functions (at most {cap}): "
                        + ", ".join(f"{p.relative_to(root)}:{line}" for p, line, _ in groups))
    problems += [f"{p.relative_to(root)}:{line}: an import inside a function needs a comment giving the reason"
                 for p, line, why in groups if not why]
    return problems


def test_plugins_import_at_module_level_save_a_few_explained_ones():
    problems = function_import_problems(PLUGINS, MAX_PLUGIN_FUNCTION_IMPORTS)
    assert not problems, "\n".join(problems)


def declared_public_modules(root: pathlib.Path, family: str) -> set[str]:
    """The modules a family declares other families may import: ``public_modules`` in its
    ``__init__.py``, a tuple of module names relative to the family (read from the source)."""
    init = root / PLUGIN_PACKAGE / family / "__init__.py"
    if not init.exists():
        return set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "public_modules"
                                                for t in node.targets):
            return {f"{PLUGIN_PACKAGE}.{family}.{name}" for name in ast.literal_eval(node.value)}
    return set()


def cross_family_problems(root: pathlib.Path) -> list[str]:
    """Imports of one family's module by another family that the first does not declare public."""
    public: dict[str, set[str]] = {}
    problems = []
    for imp in plugin_imports(root):
        source_parts, target_parts = imp.source.split("."), imp.target.split(".")
        if len(source_parts) < 3 or len(target_parts) < 2 or source_parts[1] == target_parts[1]:
            continue
        family = target_parts[1]
        if not (root / PLUGIN_PACKAGE / family).is_dir():
            continue          # a module of the package itself (rule_helpers, _lazy): shared by all
        if family not in public:
            public[family] = declared_public_modules(root, family)
        if imp.target not in public[family]:
            problems.append(f"{imp.source}:{imp.line} imports {imp.target}, which the {family} family does not "
                            f"declare public (public_modules in gradreg_plugins/{family}/__init__.py: "
                            f"{sorted(public[family]) or 'none'})")
    return problems


def test_families_import_each_other_only_through_declared_public_modules():
    problems = cross_family_problems(PLUGINS)
    assert not problems, "\n".join(problems)


def test_every_declared_public_module_exists():
    modules = plugin_modules(PLUGINS)
    for family in sorted(p.name for p in (PLUGINS / PLUGIN_PACKAGE).iterdir() if (p / "__init__.py").exists()):
        missing = sorted(declared_public_modules(PLUGINS, family) - set(modules))
        assert not missing, f"the {family} family declares public modules it does not have: {missing}"


# -- the checks fail on what they guard against ---------------------------------------------------------

def _tree(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_core_check_sees_an_import_of_a_plugin_even_inside_a_function(tmp_path):
    tree = _tree(tmp_path, {"gradreg/__init__.py": "",
                            "gradreg/onnx_backend.py": "def load():\n    import gradreg_plugins.onnx.backend\n",
                            "gradreg/fine.py": "import gradreg.errors\n"})
    assert core_imports_of_plugins(tree / "gradreg", tree) == [
        "gradreg/onnx_backend.py:2 imports gradreg_plugins.onnx.backend"]


def test_the_cycle_check_sees_a_cycle_held_together_by_an_import_inside_a_function(tmp_path):
    tree = _tree(tmp_path, {
        "gradreg_plugins/__init__.py": "", "gradreg_plugins/onnx/__init__.py": "",
        "gradreg_plugins/onnx/format.py": "from gradreg_plugins.onnx import exporter\n",
        "gradreg_plugins/onnx/exporter.py": "def attrs():\n    from gradreg_plugins.onnx.grads import sampling\n",
        "gradreg_plugins/onnx/grads/__init__.py": "",
        "gradreg_plugins/onnx/grads/sampling.py": "import gradreg_plugins.onnx.format\n",
        "gradreg_plugins/onnx/shapes.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                          "    from gradreg_plugins.onnx import nodes\n",
        "gradreg_plugins/onnx/nodes.py": "from gradreg_plugins.onnx import shapes\n"})
    assert plugin_cycles(tree) == [["gradreg_plugins.onnx.exporter", "gradreg_plugins.onnx.format",
                                    "gradreg_plugins.onnx.grads.sampling"]]


def test_the_function_import_check_counts_groups_and_wants_a_reason_for_each(tmp_path):
    tree = _tree(tmp_path, {
        "gradreg_plugins/__init__.py": "", "gradreg_plugins/onnx/__init__.py": "",
        "gradreg_plugins/onnx/importer.py": (
            "def read():\n    import onnx  # an optional dependency\n    from onnx import helper\n"
            "def write():\n    from gradreg_plugins.onnx import exporter\n"
            "def convert():\n    # start-up: the converter is big\n    import gradreg_plugins.onnx.opset\n")})
    assert function_import_problems(tree, 3) == [
        "gradreg_plugins/onnx/importer.py:5: an import inside a function needs a comment giving the reason"]
    assert function_import_problems(tree, 2)[0].startswith("3 groups of imports inside functions (at most 2)")


def test_the_family_check_sees_an_import_of_an_undeclared_module_of_another_family(tmp_path):
    tree = _tree(tmp_path, {
        "gradreg_plugins/__init__.py": "", "gradreg_plugins/rule_helpers.py": "",
        "gradreg_plugins/array/__init__.py": 'public_modules = ("slicing",)\n',
        "gradreg_plugins/array/slicing.py": "", "gradreg_plugins/array/grads.py": "",
        "gradreg_plugins/math/__init__.py": "",
        "gradreg_plugins/math/kernels.py": "from gradreg_plugins.array import slicing\n"
                                           "from gradreg_plugins.rule_helpers import conj\n",
        "gradreg_plugins/math/grads.py": "from gradreg_plugins.math import kernels\n"
                                         "from gradreg_plugins.array.grads import landed_indices\n"})
    problems = cross_family_problems(tree)
    assert len(problems) == 1 and problems[0].startswith(
        "gradreg_plugins.math.grads:2 imports gradreg_plugins.array.grads, which the array family does not declare "
        "public")


def test_every_list_of_the_built_in_families_names_all_of_them():
    """pyproject.toml's entry points, the packages of plugins/gradreg_plugins/, the registry's known
    plugins and the docstrings that list the families say the same ten (they once said 5 and 7)."""
    import tomllib  # test-only: the stdlib TOML reader

    from gradreg.registry.support import KNOWN_PLUGINS

    packages = {p.name for p in (PLUGINS / PLUGIN_PACKAGE).iterdir() if (p / "__init__.py").exists()}
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["gradreg.plugins"]
    assert {name for name, target in entry_points.items() if target.endswith(":family")} == packages
    assert {k.name for k in KNOWN_PLUGINS if k.target.startswith(f"{PLUGIN_PACKAGE}.")} == packages
    for path in (PACKAGE / "registry" / "hookspecs.py", PLUGINS / PLUGIN_PACKAGE / "__init__.py"):
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert not {name for name in packages if name not in docstring.replace("\n", " ")}, path


def registration_problems(path: pathlib.Path) -> list[str]:
    """Ways of registering a gradient rule other than ``family.gradient(...)``: an alias of the
    method (``gradient = family.gradient``), a module's own registering decorator (a bare
    ``@gradient(...)``), or a write into a family's table (``family.gradients[op_type] = rule``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            if isinstance(node.value, ast.Attribute) and node.value.attr == "gradient":
                found.append(f"line {node.lineno}: an alias of .gradient")
            found += [f"line {node.lineno}: writes into .gradients" for t in node.targets
                      if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute)
                      and t.value.attr == "gradients"]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                call = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(call, ast.Name) and call.id == "gradient":
                    found.append(f"line {decorator.lineno}: @gradient, not @family.gradient")
    return found


@pytest.mark.parametrize("path", sorted((PLUGINS / PLUGIN_PACKAGE).rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_rules_are_registered_only_with_family_gradient(path):
    found = registration_problems(path)
    assert not found, f"{path.relative_to(ROOT)} registers rules another way:\n" + "\n".join(found)


def test_the_registration_check_sees_each_other_way(tmp_path):
    source = tmp_path / "grads.py"
    source.write_text("gradient = family.gradient\n\n@gradient('Abs')\ndef _abs(op, g):\n    return g\n\n"
                      "family.gradients['Neg'] = _abs\n\n"
                      "@family.gradient('Sign')\ndef _sign(op, g):\n    return None\n")
    assert registration_problems(source) == ["line 1: an alias of .gradient", "line 3: @gradient, not @family.gradient",
                                             "line 7: writes into .gradients"]


# The helpers gradreg_plugins.rule_helpers holds for the families whose rules build TensorFlow ops
# (the onnx family's rules build ONNX ops: their helpers are gradreg_plugins.onnx.grads.common).
SHARED_RULE_HELPERS = {"conj", "unbroadcast", "unbroadcast_to", "unbroadcast_batch", "broadcast_axes", "mul",
                       "div", "neg", "reduction", "dense_gradients", "with_dense_grads", "landed_indices"}


def copied_rule_helpers(path: pathlib.Path) -> list[str]:
    """Module-level functions and classes of ``path`` named as a shared rule helper (with or without
    a leading underscore): a per-file copy of what rule_helpers provides, or of an operator."""
    return [f"line {node.lineno}: {node.name}" for node in ast.parse(path.read_text()).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and node.name.lstrip("_").lower() in SHARED_RULE_HELPERS]


RULE_MODULES = [p for p in sorted((PLUGINS / PLUGIN_PACKAGE).rglob("*.py"))
                if "onnx" not in p.parts and p.name != "rule_helpers.py" and "family.gradient" in p.read_text()]


@pytest.mark.parametrize("path", RULE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_rule_modules_use_the_shared_helpers_rather_than_copies(path):
    found = copied_rule_helpers(path)
    assert not found, (f"{path.relative_to(ROOT)} defines its own copy of a shared rule helper "
                       f"(use gradreg_plugins.rule_helpers or an operator):\n" + "\n".join(found))


def test_the_copy_check_sees_a_copied_helper(tmp_path):
    source = tmp_path / "grads.py"
    source.write_text("def _conj(t):\n    return t\n\ndef _mul(a, b):\n    return a\n\nclass _Reduction:\n    pass\n\n"
                      "def _abs_grad(op, grad):\n    return grad\n")
    assert copied_rule_helpers(source) == ["line 1: _conj", "line 4: _mul", "line 7: _Reduction"]
