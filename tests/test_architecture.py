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


def _is_private(name: str) -> bool:
    # _gradreg_tensor_ and friends are conversion protocols (like __array__), not private names.
    return name.startswith("_") and not name.startswith("__") and not (
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

PLUGINS = ROOT / "plugins"
# Families whose own import graph is checked below (no cycle, few explained imports inside functions).
CHECKED_FAMILIES = {"onnx": 11}      # family -> at most this many groups of imports inside functions


def test_the_core_imports_no_plugin():
    """gradreg/ finds plugins through entry points; it never names one (imports inside functions too)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] == "gradreg_plugins"]
    assert not found, "the core imports plugins:\n" + "\n".join(found)


def _family_modules(family: str) -> dict[str, pathlib.Path]:
    return _modules(PLUGINS / "gradreg_plugins" / family, PLUGINS)


def _family_imports(family: str) -> list[tuple[str, str, bool, bool]]:
    """(module, imported gradreg_plugins module, inside a function, TYPE_CHECKING-only) of a family."""
    modules = {**_family_modules(family)}
    everything = _modules(PLUGINS / "gradreg_plugins", PLUGINS)
    out = []

    def resolve(name: str, imported: str | None) -> str | None:
        if name.split(".")[0] != "gradreg_plugins":
            return None
        if imported is not None and f"{name}.{imported}" in everything:
            return f"{name}.{imported}"
        return name

    def walk(node: ast.AST, source: str, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            only = type_only or (isinstance(child, ast.If) and _is_type_checking(child.test))
            if isinstance(child, ast.Import):
                out.extend((source, t, in_function, type_only) for a in child.names
                           if (t := resolve(a.name, None)) is not None)
            elif isinstance(child, ast.ImportFrom):
                out.extend((source, t, in_function, type_only) for a in child.names
                           if (t := resolve(child.module or "", a.name)) is not None)
            walk(child, source, inside, only)

    for module, path in modules.items():
        walk(ast.parse(path.read_text()), module, False, False)
    return out


@pytest.mark.parametrize("family", sorted(CHECKED_FAMILIES))
def test_a_family_has_no_import_cycle(family):
    edges: dict[str, set[str]] = {}
    for source, target, _, type_only in _family_imports(family):
        if not type_only and target != source and not _within(source, target):
            edges.setdefault(source, set()).add(target)
    cycles = _cycles(edges)
    assert not cycles, f"import cycles in the {family} family:\n" + "\n".join(" <-> ".join(c) for c in cycles)


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


@pytest.mark.parametrize("family", sorted(CHECKED_FAMILIES))
def test_a_family_imports_at_module_level_save_a_few_explained_ones(family):
    groups = [(path, line, why) for path in _family_modules(family).values()
              for line, why in _function_import_groups(path)]
    listing = "\n".join(f"{p.relative_to(ROOT)}:{line}" for p, line, _ in groups)
    assert len(groups) <= CHECKED_FAMILIES[family], (
        f"{len(groups)} groups of imports inside functions in the {family} family (at most "
        f"{CHECKED_FAMILIES[family]}):\n{listing}")
    unexplained = [f"{p.relative_to(ROOT)}:{line}" for p, line, why in groups if not why]
    assert not unexplained, "imports inside functions need a comment giving the reason:\n" + "\n".join(unexplained)
