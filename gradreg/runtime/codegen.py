"""The code generator behind execution plans: a tiny block IR, lifetime analysis, compilation.

A plan is emitted as a :class:`Block` of statements, each declaring the variables it
defines and uses; loops are nested blocks. :func:`insert_releases` then frees every
variable right after its last use, at the level that owns it:

* a variable is owned by the innermost block containing all its definitions and uses,
  except that a loop body cannot own a variable read before it is (re)defined in the
  body (it carries a value from the previous iteration or from before the loop);
* it is released after the last statement of its owner that uses it — with ``del`` if
  that owner defines it unconditionally before, else by assigning None (it may never
  have been defined on this path);
* after each loop, the variables owned inside it are set to None, covering the
  iteration that left by ``break`` before reaching their release;
* a statement that can take over arrays it reads (``Stmt.handoff``: a fused elementwise
  kernel writing its output into a dead input's memory) is rewritten to pass each variable
  released right after it as ``(v, v := None)[0]``: the local lets go of the value before
  the call, so inside the kernel the call's own reference is the only one left.

:func:`render` turns the IR into source; :class:`CompiledFunction` compiles it and maps
a failing line back to the node it runs.
"""
from __future__ import annotations

import itertools
import linecache
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_function_ids = itertools.count()


@dataclass
class Stmt:
    """One line of code: defines ``defs``, reads ``uses``; ``op`` is the node it runs (errors).
    ``handoff(released)``, when set, is the line rewritten to hand over the variables in
    ``released`` (those dropped right after it) to the call it makes."""
    text: str
    defs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    op: Any = None
    handoff: Any = None


@dataclass
class Nested:
    """A compound statement: ``header`` (``while True:``, ``if ...:``) over ``body``.

    ``is_loop`` marks loop bodies (their variables may carry across iterations);
    ``header_uses`` are the variables the header reads; ``trailing_release`` (set by
    insert_releases) the variables to drop after a loop; ``op`` the node whose value the
    header tests (errors raised by the test name it).
    """
    header: str
    body: Block
    is_loop: bool = False
    header_uses: tuple[str, ...] = ()
    trailing_release: list[str] = field(default_factory=list)
    op: Any = None


@dataclass
class Block:
    items: list[Any] = field(default_factory=list)

    def add(self, text: str, defs: Iterable[str] = (), uses: Iterable[str] = (), op: Any = None,
            handoff: Any = None) -> None:
        self.items.append(Stmt(text, tuple(defs), tuple(uses), op, handoff))

    def nest(self, header: str, is_loop: bool = False, header_uses: Iterable[str] = (), op: Any = None) -> Block:
        inner = Block()
        self.items.append(Nested(header, inner, is_loop, tuple(header_uses), op=op))
        return inner


# -- lifetime analysis ---------------------------------------------------------------------

@dataclass
class _Ref:
    """Where a variable is mentioned: the chain of (block, item index) from the root."""
    path: tuple[tuple[int, int], ...]
    defines: bool
    uses: bool


class _Scan:
    """Every mention of every variable in a block tree, with the tree's structure."""

    def __init__(self, root: Block):
        self.blocks: dict[int, Block] = {}
        self.parents: dict[int, tuple[int, int]] = {}   # block id -> (parent block id, index of its Nested item)
        self.loops: set[int] = set()                    # ids of loop-body blocks
        self.refs: dict[str, list[_Ref]] = {}
        self.walk(root, ())

    def walk(self, block: Block, path: tuple[tuple[int, int], ...]) -> None:
        self.blocks[id(block)] = block
        for i, item in enumerate(block.items):
            here = path + ((id(block), i),)
            if isinstance(item, Stmt):
                self.mention(item.uses, here, uses=True)
                self.mention(item.defs, here, uses=False)
            else:
                self.mention(item.header_uses, here, uses=True)
                self.parents[id(item.body)] = (id(block), i)
                if item.is_loop:
                    self.loops.add(id(item.body))
                self.walk(item.body, here)

    def mention(self, names: Iterable[str], path: tuple[tuple[int, int], ...], uses: bool) -> None:
        for v in names:
            self.refs.setdefault(v, []).append(_Ref(path, not uses, uses))

    def owner(self, var_refs: list[_Ref]) -> tuple[int, int]:
        """The block owning a variable (see the module docstring) and its depth."""
        depth = _common_depth([r.path for r in var_refs])
        owner = var_refs[0].path[depth][0]
        while owner in self.loops and _carried(var_refs, depth):
            owner, _ = self.parents[owner]
            depth -= 1
        return owner, depth

    def enclosing_loop(self, block_id: int) -> tuple[int, int] | None:
        """The Nested item (block id, index) of the nearest loop around ``block_id``, if any."""
        while block_id in self.parents:
            parent, index = self.parents[block_id]
            if block_id in self.loops:
                return parent, index
            block_id = parent
        return None


def insert_releases(root: Block, keep: set[str]) -> None:
    """Free every variable after its last use, at the block that owns it (see module docstring)."""
    scan = _Scan(root)
    releases: dict[int, dict[int, list[str]]] = {}    # block id -> item index -> variables
    trailing: dict[tuple[int, int], list[str]] = {}    # loop item (block id, index) -> variables
    for var, var_refs in scan.refs.items():
        if var in keep:
            continue
        owner, depth = scan.owner(var_refs)
        last = max(r.path[depth][1] for r in var_refs)
        releases.setdefault(owner, {}).setdefault(last, []).append(var)
        loop = scan.enclosing_loop(owner)      # the nearest loop around the owner cleans up after a break
        if loop is not None:
            trailing.setdefault(loop, []).append(var)
    for (block_id, index), names in trailing.items():   # before releases shift the indices
        nested = scan.blocks[block_id].items[index]
        assert isinstance(nested, Nested)
        nested.trailing_release = sorted(names)
    for block_id, by_index in releases.items():
        _apply_releases(scan.blocks[block_id], by_index)


def _common_depth(paths: list[tuple[Any, ...]]) -> int:
    """Depth of the deepest block that contains every path."""
    depth = 0
    while all(len(p) > depth + 1 for p in paths) and len({p[depth] for p in paths}) == 1:
        depth += 1
    return depth


def _carried(var_refs: list[_Ref], depth: int) -> bool:
    """Whether a variable owned by a loop body is read before the body (re)defines it."""
    first_def = min((r.path[depth][1] for r in var_refs if r.defines and len(r.path) == depth + 1),
                    default=None)
    if first_def is None:
        return True
    return any(r.uses and r.path[depth][1] <= first_def for r in var_refs)


def _apply_releases(block: Block, by_index: dict[int, list[str]]) -> None:
    # Where each variable is first defined by a statement of this block itself (one pass, so
    # a plan of n statements is released in O(n), not O(n^2)).
    first_def: dict[str, int] = {}
    for i, item in enumerate(block.items):
        if isinstance(item, Stmt):
            for var in item.defs:
                first_def.setdefault(var, i)
    out: list[Any] = []
    for i, item in enumerate(block.items):
        out.append(item)
        names = by_index.get(i)
        if not names:
            continue
        definite = sorted(v for v in names if first_def.get(v, i + 1) <= i)
        maybe = sorted(set(names) - set(definite))
        if definite and isinstance(item, Stmt) and item.handoff is not None:
            item.text = item.handoff(set(definite))
        if definite:
            out.append(Stmt("del " + ", ".join(definite)))
        if maybe:
            out.append(Stmt(" = ".join(maybe) + " = None"))
    block.items = out


# -- rendering and compiling ------------------------------------------------------------------

def handed_over(name: str) -> str:
    """The expression passing variable ``name``'s value to a call while the local lets go of it
    (Stmt.handoff)."""
    return f"({name}, {name} := None)[0]"


def render(block: Block, indent: int, lines: list[str], line_ops: dict[int, Any]) -> None:
    pad = "    " * indent
    for item in block.items:
        if isinstance(item, Stmt):
            lines.append(pad + item.text)
            if item.op is not None:
                line_ops[len(lines)] = item.op
        else:
            lines.append(pad + item.header)
            if item.op is not None:
                line_ops[len(lines)] = item.op
            if not item.body.items:
                lines.append(pad + "    pass")
            render(item.body, indent + 1, lines, line_ops)
            if item.trailing_release:
                lines.append(pad + " = ".join(item.trailing_release) + " = None")


class CompiledFunction:
    """Source compiled into ``fn``, with the node each line runs (for error messages)."""

    def __init__(self, name: str, params: str, body: Block, namespace: dict[str, Any]):
        lines: list[str] = [f"def {name}({params}):"]
        line_ops: dict[int, Any] = {}
        render(body, 1, lines, line_ops)
        self.source = "\n".join(lines) + "\n"
        self.filename = f"<gradreg-plan-{next(_function_ids)}>"
        code = compile(self.source, self.filename, "exec")
        linecache.cache[self.filename] = (len(self.source), None, self.source.splitlines(True), self.filename)
        scope = dict(namespace)
        exec(code, scope)
        self.fn = scope[name]
        self.line_ops = line_ops

    def failing_op(self, exc: BaseException) -> Any:
        """The node whose line raised ``exc`` (the innermost generated frame), or None."""
        tb = exc.__traceback__
        found = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                found = self.line_ops.get(tb.tb_lineno, found)
            tb = tb.tb_next
        return found
