"""The view model: a graph's ops as nodes in a tree of boxes, ready to draw.

Boxes are name scopes (``a/b/op`` sits in box ``a`` > ``a/b``), v1 control-flow frames
(the ops of one ``Enter(frame_name=...)`` loop), functional calls (``If``, ``While``,
``PartitionedCall``, ... with their function bodies from the graph's library) and groups
of sibling scopes that share a numbered stem (Keras' ``block_1_expand``, ``block_1_pad``,
... make a group ``block_1_*``) when a scope holds too many children to read.

Only gradreg's public Graph API is used: ``graph.get_operations()``, ``op.name``, ``op.type``,
``op.inputs``, ``op.control_inputs``, ``op.outputs``, ``op.node_def``, ``tensor.shape``,
``graph.library``.

Which ops are gradient ops (drawn in the gradient colour) -- the rule, first match wins:

1. ``gradient_ops`` passed by the caller (names or Operations) are exactly the gradient ops;
2. an op under a scope named ``gradients`` or ``gradients_<N>`` at any depth (the default
   scope of gradreg.gradients, tf.gradients and Optimizer.minimize);
3. an op under a scope ``<X>_grad`` where ``<X>`` names an op of the graph (the scope a
   gradient rule runs in, whatever name= was given to gradients()), and every op under the
   scope such ``<X>_grad`` scopes sit in (the name= scope itself, holding the seeds), and an
   op named ``<X>_grad`` (how gradreg names the gradient with respect to ``X`` it hands out);
4. inside a function body: the function is some function's GradientDef target, or its name
   ends in ``_grad`` (gradreg's and TensorFlow's names for gradient functions).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gradreg.errors import GraphError
from gradreg.model.traversal import needed_ops, topological_order

FORWARD = "forward"
GRADIENT = "gradient"

# A scope with more children than this gets its numbered siblings grouped.
GROUP_THRESHOLD = 16
# Function bodies nested deeper than this are not unfolded (a call stays one node).
MAX_FUNCTION_NESTING = 4

_GRADIENT_SCOPE = re.compile(r"^gradients(_\d+)?$")
_LOOP_ENTER = frozenset({"Enter", "RefEnter"})
_LOOP_EXIT = frozenset({"Exit", "RefExit"})


@dataclass
class Node:
    """One op (or one node of a function body)."""
    id: str
    name: str
    op_type: str
    shapes: list[str]
    kind: str
    box: str = ""
    context: bool = False          # outside the ys/xs path, shown for context
    calls: list[str] = field(default_factory=list)   # functions a functional call op runs
    plumbing: bool = False         # a value or a synchronisation drawn inside its consumers (see hide_plumbing)
    params: list[str] = field(default_factory=list)  # the plumbing it reads, one line each


@dataclass
class Edge:
    """A data edge (``port`` = the producer's output index) or a control edge (``port`` -1)."""
    src: str
    dst: str
    port: int
    shape: str = ""

    @property
    def control(self) -> bool:
        return self.port < 0


@dataclass
class Box:
    """A scope, loop frame, call, function body or stem group holding nodes and boxes."""
    id: str
    key: str          # what --expand matches: the scope path, frame name or call op name
    label: str
    kind: str         # "root" | "scope" | "group" | "frame" | "call" | "function"
    parent: str | None
    depth: int = 0    # nesting level, counted from the top or from the enclosing function body
    boxes: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    count: int = 0            # nodes inside, at any depth
    gradient_count: int = 0

    @property
    def kind_colour(self) -> str:
        return GRADIENT if self.gradient_count * 2 > self.count else FORWARD


@dataclass
class View:
    nodes: dict[str, Node]
    edges: list[Edge]
    boxes: dict[str, Box]
    plumbing_hidden: bool = False     # made by hide_plumbing: nodes list the plumbing they read

    def chain(self, node_id: str) -> list[str]:
        """The ids of the boxes holding a node, outermost first (the root excluded)."""
        out: list[str] = []
        box: str | None = self.nodes[node_id].box
        while box:
            out.append(box)
            box = self.boxes[box].parent
        return out[::-1]


def shape_text(shape: Any) -> str:
    """``[8,?,3]`` for a static shape, ``[]`` for a scalar, ``?`` for an unknown rank."""
    dims = None if shape is None else getattr(shape, "dims", shape)
    if dims is None:
        return "?"
    return "[" + ",".join("?" if d is None or d == -1 else str(d) for d in dims) + "]"


# -- selection: the ops between ys and xs -------------------------------------------------

def _resolve_ops(graph, names: Iterable[Any], what: str) -> list:
    ops = []
    for item in names:
        target = item
        if isinstance(item, str):
            op_name = item.split(":")[0]
            if op_name not in graph:
                raise GraphError(f"--{what} names '{item}', but the graph has no operation '{op_name}'")
            target = graph.get_operation(op_name)
        ops.append(getattr(target, "op", target))
    return ops


def _ancestors(ops: Iterable) -> set:
    return set(needed_ops(list(ops), set()))


def _descendants(ops: Iterable) -> set:
    seen, stack = set(), list(ops)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for t in op.outputs:
            stack.extend(t.consumers())
        stack.extend(op.control_outputs)
    return seen


def select_ops(graph, ys: Sequence[Any] | None, xs: Sequence[Any] | None) -> tuple[list, set]:
    """The ops on paths from the xs to the ys (either side may be omitted), and their context:
    the direct inputs of those ops that are not on a path themselves."""
    ops = graph.get_operations()
    if not ys and not xs:
        return ops, set()
    keep = set(ops)
    if ys:
        keep &= _ancestors(_resolve_ops(graph, ys, "ys"))
    if xs:
        keep &= _descendants(_resolve_ops(graph, xs, "xs"))
    if not keep:
        raise GraphError(f"no path leads from the xs {list(map(str, xs or []))} "
                         f"to the ys {list(map(str, ys or []))}")
    context = {t.op for op in keep for t in op.inputs} | {c for op in keep for c in op.control_inputs}
    context -= keep
    return [op for op in ops if op in keep or op in context], context


# -- gradient classification --------------------------------------------------------------

def _grad_scope_roots(name: str, op_names: set[str]) -> Iterable[int]:
    """For each scope component ``<X>_grad`` of ``name`` whose ``<X>`` (taken relative to
    some scope prefix) names an op, the length of that prefix: where gradients() was rooted."""
    parts = name.split("/")[:-1]
    for i, part in enumerate(parts):
        if part.endswith("_grad") and len(part) > 5:
            base = part[:-5]
            for j in range(i + 1):
                if "/".join(parts[j:i] + [base]) in op_names:
                    yield j
                    break


class GradientRule:
    """Rules 2 and 3 of the module docstring for one graph's op names. The scope a
    ``<X>_grad`` scope sits in (``my_grads`` for ``my_grads/dense/MatMul_grad/...``) marks
    every op under it, so the seed ops of gradients() (``my_grads/grad_ys_0``) count too."""

    def __init__(self, op_names: set[str]):
        self.op_names = op_names
        self.roots: set[str] = set()
        for name in op_names:
            parts = name.split("/")
            self.roots.update("/".join(parts[:j]) for j in _grad_scope_roots(name, op_names) if j > 0)

    def __call__(self, name: str) -> bool:
        if name.endswith("_grad") and name[:-5] in self.op_names:     # the gradient of op <X>, named <X>_grad
            return True
        parts = name.split("/")[:-1]
        if any(_GRADIENT_SCOPE.match(part) for part in parts):
            return True
        if any("/".join(parts[:k]) in self.roots for k in range(1, len(parts) + 1)):
            return True
        return any(True for _ in _grad_scope_roots(name, self.op_names))


def _gradient_functions(library) -> set[str]:
    names = set(library.names())
    out = {n for n in names if n.endswith("_grad")}
    for n in names:
        grad = library.gradient_function(n)
        if grad:
            out.add(grad)
    return out


# -- v1 control-flow frames ---------------------------------------------------------------

def loop_frames(ops: Sequence) -> dict[Any, tuple[str, ...]]:
    """Each op's v1 frame chain, outermost first (``()`` outside every loop).

    An Enter op opens the frame named by its ``frame_name`` attr inside its input's frame;
    an Exit op is in the frame it leaves, its output in the parent frame; every other op is
    in the frame of its inputs. Propagated from the ops without inputs along data and control
    edges; the first frame that reaches an op wins (a well-formed graph gives one answer).
    """
    frames: dict[Any, tuple[str, ...]] = {}
    pending = [op for op in ops if not op.inputs and not op.control_inputs]
    for op in pending:
        frames[op] = ()
    while pending:
        op = pending.pop()
        inner = frames[op]
        out_frame = inner[:-1] if op.type in _LOOP_EXIT and inner else inner
        consumers = [c for t in op.outputs for c in t.consumers()] + op.control_outputs
        for c in consumers:
            if c in frames:
                continue
            frames[c] = out_frame + (_frame_name(c),) if c.type in _LOOP_ENTER else out_frame
            pending.append(c)
    for op in ops:                 # ops in a cycle with no way in: leave them at the top
        frames.setdefault(op, ())
    return frames


def _frame_name(op) -> str:
    for entry in op.node_def.attr:
        if entry.key == "frame_name":
            return entry.value.s.decode("utf-8", "replace")
    return op.name


# -- function calls ----------------------------------------------------------------------

def called_functions(node_def, library) -> list[str]:
    """The library functions a node runs: func attrs (If, While, PartitionedCall, ...) and an
    op type that is itself a library function."""
    out = []
    for entry in node_def.attr:
        value = entry.value
        which = value.WhichOneof("value")
        if which == "func":
            out.append(value.func.name)
        elif which == "list":
            out.extend(f.name for f in value.list.func)
    if node_def.op in library:
        out.append(node_def.op)
    return [name for name in out if name in library]


# -- building the view --------------------------------------------------------------------

def build_view(graph, ys: Sequence[Any] | None = None, xs: Sequence[Any] | None = None,
               gradient_ops: Iterable[Any] | None = None) -> View:
    """The :class:`View` of ``graph``: every op (or the ops between ``xs`` and ``ys`` and their
    direct inputs), placed in scope, frame, call and function boxes."""
    ops, context = select_ops(graph, ys, xs)
    all_names = {op.name for op in graph.get_operations()}
    scopes = scope_paths(all_names)
    explicit = None if gradient_ops is None else {getattr(o, "name", o) for o in gradient_ops}
    is_gradient = GradientRule(all_names)
    frames = loop_frames(graph.get_operations())
    view = View(nodes={}, edges=[], boxes={"": Box(id="", key="", label="", kind="root", parent=None)})
    builder = _Builder(view, graph.library)
    entries = []
    for op in ops:
        is_grad = op.name in explicit if explicit is not None else is_gradient(op.name)
        node = Node(id=op.name, name=op.name, op_type=op.type, shapes=[shape_text(t.shape) for t in op.outputs],
                    kind=GRADIENT if is_grad else FORWARD, context=op in context,
                    calls=called_functions(op.node_def, graph.library))
        view.nodes[node.id] = node
        entries.append((node, _scope_parts(op.name, scopes), frames[op]))
    builder.place(entries, root="", key_prefix="")
    kept = set(view.nodes)
    for op in ops:
        for t in op.inputs:
            if t.op.name in kept:
                view.edges.append(Edge(t.op.name, op.name, t.value_index, shape_text(t.shape)))
        view.edges.extend(Edge(c.name, op.name, -1) for c in op.control_inputs if c.name in kept)
    for node, _, _ in entries:
        if node.calls:
            builder.unfold_call(node, stack=())
    mark_plumbing(view, ops)
    _finish(view)
    return view


def scope_paths(names: Iterable[str]) -> set[str]:
    """Every scope path of a namespace: all proper prefixes of its op names."""
    out: set[str] = set()
    for name in names:
        parts = name.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return out


def _scope_parts(name: str, scopes: set[str]) -> list[str]:
    """The scope components of an op name. An op that shares its name with a scope
    (``group(..., name="train")`` beside ``train/...``) goes inside it, as in TensorBoard."""
    parts = name.split("/")
    return parts if name in scopes else parts[:-1]


def _frame_prefixes(entries) -> dict[tuple, list[str]]:
    """For each frame chain, the longest scope prefix shared by every op in that frame or
    in a frame nested in it: where the frame's box goes in the scope tree."""
    out: dict[tuple, list[str]] = {}
    for _, parts, chain in entries:
        for k in range(1, len(chain) + 1):
            key = chain[:k]
            known = out.get(key)
            if known is None:
                out[key] = list(parts)
                continue
            n = 0
            while n < min(len(known), len(parts)) and known[n] == parts[n]:
                n += 1
            del known[n:]
    return out


def _path_tokens(parts: list[str], chain: tuple, prefixes: dict) -> list[tuple]:
    """The boxes from the top down to an op: scope tokens, with each frame of its chain
    inserted after its scope prefix."""
    tokens: list[tuple] = []
    pos = 0
    for k in range(1, len(chain) + 1):
        end = len(prefixes[chain[:k]])
        tokens.extend(("scope", "/".join(parts[:i + 1])) for i in range(pos, end))
        tokens.append(("frame", chain[:k]))
        pos = end
    tokens.extend(("scope", "/".join(parts[:i + 1])) for i in range(pos, len(parts)))
    return tokens


class _Builder:
    """Creates boxes and function-body nodes for :func:`build_view`."""

    def __init__(self, view: View, library):
        self.view = view
        self.library = library
        self.gradient_functions = _gradient_functions(library)
        self.counter = 0

    def new_box(self, key: str, label: str, kind: str, parent: str) -> Box:
        self.counter += 1
        box = Box(id=f"b{self.counter}", key=key, label=label, kind=kind, parent=parent)
        self.view.boxes[box.id] = box
        self.view.boxes[parent].boxes.append(box.id)
        return box

    def place(self, entries, root: str, key_prefix: str) -> None:
        """Put each (node, scope parts, frame chain) in its box, creating boxes on the way."""
        prefixes = _frame_prefixes(entries)
        made: dict[tuple, str] = {(): root}
        for node, parts, chain in entries:
            tokens = _path_tokens(parts, chain, prefixes)
            box = root
            for i, (kind, value) in enumerate(tokens):
                path = tuple(tokens[:i + 1])
                found = made.get(path)
                if found is None:
                    if kind == "scope":
                        new = self.new_box(key_prefix + value, value.rsplit("/", 1)[-1], "scope", box)
                    else:
                        new = self.new_box(key_prefix + value[-1], value[-1], "frame", box)
                    found = made[path] = new.id
                box = found
            node.box = box
            self.view.boxes[box].nodes.append(node.id)

    def unfold_call(self, node: Node, stack: tuple) -> None:
        """Give a call op a box holding it and one box per function body it runs."""
        if len(stack) >= MAX_FUNCTION_NESTING:
            return
        boxes = self.view.boxes
        boxes[node.box].nodes.remove(node.id)
        call = self.new_box(node.name, node.name.rsplit("/", 1)[-1], "call", node.box)
        node.box = call.id
        call.nodes.append(node.id)
        for fname in dict.fromkeys(node.calls):
            if fname in stack:          # a recursive call: its body is already open above
                continue
            body = self.new_box(f"{node.name}/{fname}", fname, "function", call.id)
            self.function_body(body, fname, node.kind, stack + (fname,))

    def function_body(self, box: Box, fname: str, caller_kind: str, stack: tuple) -> None:
        fdef = self.library.get(fname)
        kind = GRADIENT if fname in self.gradient_functions else caller_kind
        prefix = box.key + "/"
        made = [Node(id=f"{box.id}:{a.name}", name=prefix + a.name, op_type="_Arg", shapes=[""], kind=kind)
                for a in fdef.signature.input_arg]
        for nd in fdef.node_def:
            made.append(Node(id=f"{box.id}:{nd.name}", name=prefix + nd.name, op_type=nd.op,
                             shapes=_output_shapes(nd), kind=kind, calls=called_functions(nd, self.library)))
        made += [Node(id=f"{box.id}:<ret>{a.name}", name=prefix + a.name, op_type="_Retval", shapes=[""],
                      kind=kind) for a in fdef.signature.output_arg]
        scopes = scope_paths(nd.name for nd in fdef.node_def)
        for node in made:
            self.view.nodes[node.id] = node
        self.place([(n, _scope_parts(n.name[len(prefix):], scopes), ()) for n in made], box.id, prefix)
        self.view.edges.extend(_function_edges(fdef, box.id, self.view.nodes))
        for node in made:
            if node.calls:
                self.unfold_call(node, stack)


def _output_shapes(node_def) -> list[str]:
    for entry in node_def.attr:
        if entry.key == "_output_shapes":
            return [("?" if s.unknown_rank else shape_text([d.size for d in s.dim])) for s in entry.value.list.shape]
    return [""]


def _function_edges(fdef, box_id: str, nodes: dict[str, Node]) -> list[Edge]:
    """Edges of a function body from its NodeDef input strings (``arg``, ``node:out:i``, ``^node``)."""
    args = {a.name for a in fdef.signature.input_arg}
    edges: list[Edge | None] = []

    def edge(text: str, dst: str) -> Edge | None:
        if text.startswith("^"):
            return Edge(f"{box_id}:{text[1:]}", dst, -1)
        parts = text.split(":")
        if len(parts) == 1 and parts[0] in args:
            return Edge(f"{box_id}:{parts[0]}", dst, 0)
        src = f"{box_id}:{parts[0]}"
        port = int(parts[-1]) if len(parts) == 3 and parts[-1].isdigit() else 0
        shapes = nodes[src].shapes if src in nodes else []
        return Edge(src, dst, port, shapes[port] if len(shapes) == 1 and port == 0 else "")

    for nd in fdef.node_def:
        edges.extend(edge(text, f"{box_id}:{nd.name}") for text in nd.input)
    for a in fdef.signature.output_arg:
        for entry in fdef.ret:
            if entry.key == a.name:
                edges.append(edge(entry.value, f"{box_id}:<ret>{a.name}"))
    return [e for e in edges if e is not None and e.src in nodes]


# -- finishing: stem groups, depths, counts -----------------------------------------------

_STEM = re.compile(r"^(.*?_\d+)_")


def stem(label: str) -> str | None:
    """The numbered stem of a Keras-style layer name: ``block_1_expand_BN`` -> ``block_1``;
    None when the only number is the last part (``conv_1``)."""
    match = _STEM.match(label)
    return match.group(1) if match else None


def _group_by_stem(view: View, box: Box, counter: list[int]) -> None:
    groups: dict[str, list[str]] = {}
    for child in box.boxes:
        member = view.boxes[child]
        if member.kind == "scope":
            s = stem(member.label)
            if s is not None:
                groups.setdefault(s, []).append(child)
    new_children, placed = [], {}
    for child in box.boxes:
        s = stem(view.boxes[child].label) if view.boxes[child].kind == "scope" else None
        if s is None or len(groups.get(s, ())) < 2:
            new_children.append(child)
            continue
        if s not in placed:
            counter[0] += 1
            scope = view.boxes[child].key.rsplit("/", 1)
            key = (scope[0] + "/" if len(scope) == 2 else "") + s + "_*"
            group = Box(id=f"g{counter[0]}", key=key, label=s + "_*", kind="group", parent=box.id)
            view.boxes[group.id] = group
            placed[s] = group
            new_children.append(group.id)
        placed[s].boxes.append(child)
        view.boxes[child].parent = placed[s].id
    box.boxes = new_children


_SERIES = re.compile(r"(.*?)(?:_(\d+))?", re.DOTALL)     # fullmatch: matches every label


def _group_series(view: View, box: Box, counter: list[int]) -> list[Box]:
    """Number-suffixed siblings (Keras' ``dense``, ``dense_1``, ... ``dense_99``) in groups of
    consecutive numbers, ``dense_[0-9]``, ``dense_[10-19]``, ...: at most about ten groups of
    a series in one box; the new groups are returned (they may need splitting again)."""
    series: dict[str, list[tuple[int, str]]] = {}
    for child in box.boxes:
        member = view.boxes[child]
        if member.kind == "scope":
            base, number = _SERIES.fullmatch(member.label).groups()  # type: ignore[union-attr]  # matches any text
            series.setdefault(base, []).append((int(number or 0), child))
    made: list[Box] = []
    replaced: dict[str, str] = {}
    for base, members in series.items():
        if len(members) <= GROUP_THRESHOLD // 2:
            continue
        members.sort()
        size = max(10, -(-len(members) // 10))
        for start in range(0, len(members), size):
            chunk = members[start:start + size]
            counter[0] += 1
            label = f"{base}_[{chunk[0][0]}-{chunk[-1][0]}]"
            scope = view.boxes[chunk[0][1]].key.rsplit("/", 1)
            key = (scope[0] + "/" if len(scope) == 2 else "") + label
            group = Box(id=f"g{counter[0]}", key=key, label=label, kind="group", parent=box.id,
                        boxes=[c for _, c in chunk])
            view.boxes[group.id] = group
            for _, child in chunk:
                view.boxes[child].parent = group.id
                replaced[child] = group.id
            made.append(group)
    children = []
    for child in box.boxes:
        target = replaced.get(child, child)
        if target not in children:
            children.append(target)
    box.boxes = children
    return made


def _finish(view: View) -> None:
    counter = [0]
    work = list(view.boxes.values())
    while work:
        box = work.pop()
        if len(box.boxes) + len(box.nodes) > GROUP_THRESHOLD:
            _group_by_stem(view, box, counter)
        if len(box.boxes) + len(box.nodes) > GROUP_THRESHOLD:
            work.extend(_group_series(view, box, counter))
    order = [""]
    for box_id in order:                      # breadth first: parents before children
        box = view.boxes[box_id]
        for child in box.boxes:
            sub = view.boxes[child]
            sub.depth = 0 if sub.kind == "function" else box.depth + 1
            order.append(child)
    _count(view)


def _count(view: View) -> None:
    for box in view.boxes.values():
        box.count = box.gradient_count = 0
    for node in view.nodes.values():
        holder: str | None = node.box
        while holder is not None:
            box = view.boxes[holder]
            box.count += 1
            box.gradient_count += node.kind == GRADIENT
            holder = box.parent


# -- plumbing: values and synchronisation drawn inside the ops that use them ----------------

# Ops that hold a value (a constant, an initializer, a variable) and reads of one: drawn inside
# each op that uses them, as Netron draws an ONNX model's initializers.
VALUE_SOURCES = frozenset({"Const", "HostConst", "VarHandleOp", "VariableV2"})
VALUE_READS = frozenset({"ReadVariableOp", "Identity", "Snapshot"})
_VARIABLES = frozenset({"VarHandleOp", "VariableV2"})
# Values this small show their elements inside the op that uses them.
SHOWN_ELEMENTS = 4
_GENERIC_CONST = re.compile(r"^((Const|HostConst|const)(_\d+)?|\d+)$")


def mark_plumbing(view: View, ops: Sequence) -> None:
    """Mark the plumbing among ``ops`` (nodes of ``view``): constants, variables and their reads
    that some other op uses, and NoOps that only order other ops (TensorFlow's automatic control
    dependencies); give each other op a line per plumbing value it reads."""
    in_view = {op for op in ops if op.name in view.nodes}
    found: dict[Any, Any] = {}
    for op in topological_order(list(ops), "graph to draw"):     # producers first
        found[op] = _value_root(op, found)
    roots = {op: root for op, root in found.items() if root is not None}
    used = _values_used(in_view, roots)
    for op in in_view:
        node = view.nodes[op.name]
        if op in used or (op.type == "NoOp" and op.control_outputs and not op.outputs):
            node.plumbing = True
        else:
            node.params = [_param_line(op, i, t, roots[t.op]) for i, t in enumerate(op.inputs) if t.op in used]


def _value_root(op: Any, roots: dict[Any, Any]) -> Any:
    """The op standing for the value ``op`` holds (its inputs' already in ``roots``): a constant
    or variable (through its reads), or ``op`` itself when it computes from constants only,
    without effects (what constant folding would fold, as the Shape and Expand an exporter
    derives a bias from); None for any other op."""
    if op.type in VALUE_SOURCES and not op.inputs:
        return op
    if not op.inputs or op.control_inputs or any(roots.get(t.op) is None for t in op.inputs):
        return None
    if op.type in VALUE_READS and len(op.inputs) == 1:
        return roots[op.inputs[0].op]
    if any(roots[t.op].type in _VARIABLES for t in op.inputs):   # a variable changes: not folded
        return None
    return op if op.definition is not None and not op.definition.stateful and op.outputs else None


def _values_used(ops: set, roots: dict[Any, Any]) -> set:
    """The value ops (of ``roots``) with a path of data edges to an op that is no value op."""
    used: set = set()
    for op in ops:
        if op in roots:
            continue
        stack = [t.op for t in op.inputs if t.op in roots and t.op in ops]
        while stack:
            value = stack.pop()
            if value not in used:
                used.add(value)
                stack.extend(t.op for t in value.inputs if t.op in roots and t.op in ops)
    return used


def _param_line(op: Any, index: int, t: Any, root: Any) -> str:
    """``filter: conv1/kernel [3,3,1,4]``, ``shape [4] = [-1,1,1,4]``: the argument's name, the
    value's name when it says more, its shape, and its elements when there are few."""
    arg = input_arg_names(op)[index]
    source = root.name
    if root.type in ("Const", "HostConst"):     # a constant's scope is its user's; a bare Const_3 says nothing
        source = source.rsplit("/", 1)[-1]
        if source.startswith(arg) or _GENERIC_CONST.match(source):
            source = arg
    text = arg if source == arg else f"{arg}: {source}"
    text += " " + shape_text(t.shape)
    if root.type in ("Const", "HostConst"):
        value = _small_value(root)
        if value:
            text += " = " + value
    return text


def input_arg_names(op: Any) -> list[str]:
    """The name of each input of ``op`` in its op definition (``x``, ``filter``; ``values_1``
    for the second of a list), or ``input_<i>`` where the definition does not say."""
    names: list[str] = []
    definition = op.definition
    for arg in definition.input_args if definition is not None else ():
        try:
            count = (len(op.get_attr(arg.type_list_attr)) if arg.type_list_attr else
                     int(op.get_attr(arg.number_attr)) if arg.number_attr else 1)
        except Exception:   # noqa: BLE001  (a malformed node still gets drawn, with generic names)
            break
        names.extend([arg.name] if count == 1 else [f"{arg.name}_{k}" for k in range(count)])
    if len(names) != len(op.inputs):
        names = [f"input_{i}" for i in range(len(op.inputs))]
    return names


def _small_value(op: Any) -> str:
    try:
        value = op.get_attr("value")
    except Exception:   # noqa: BLE001  (an unreadable constant is drawn without its value)
        return ""
    flat = getattr(value, "reshape", None)
    if flat is None or value.size > SHOWN_ELEMENTS or value.dtype.kind not in "biuf":
        return ""
    items = [f"{v:.4g}" if value.dtype.kind == "f" else str(v) for v in value.reshape(-1).tolist()]
    return items[0] if value.ndim == 0 else "[" + ",".join(items) + "]"


def hide_plumbing(view: View) -> View:
    """``view`` without its plumbing nodes (each op that reads one lists it instead, see
    :func:`mark_plumbing`), their edges, and the boxes left empty; counts recomputed. Box ids
    are kept, so a folding of this view applies to the full one."""
    kept = {k: replace(n) for k, n in view.nodes.items() if not n.plumbing}
    edges = [e for e in view.edges if e.src in kept and e.dst in kept]
    boxes = {k: replace(b, boxes=list(b.boxes), nodes=[n for n in b.nodes if n in kept])
             for k, b in view.boxes.items()}
    out = View(kept, edges, boxes, plumbing_hidden=True)
    _count(out)
    for box in out.boxes.values():
        box.boxes = [c for c in box.boxes if out.boxes[c].count]
    for key in [k for k, b in out.boxes.items() if k and not b.count]:
        del out.boxes[key]
    _dissolve_single_node_scopes(out)
    _count(out)
    return out


def _dissolve_single_node_scopes(view: View) -> None:
    """A scope left holding one node and nothing else (``conv1/convolution`` around its Conv2D
    once its ReadVariableOp is hidden) is drawn as that node: the node moves up, the box goes."""
    depth: dict[str, int] = {"": 0}
    order = [""]
    for box_id in order:
        for child in view.boxes[box_id].boxes:
            depth[child] = depth[box_id] + 1
            order.append(child)
    for box_id in sorted(order[1:], key=lambda b: -depth[b]):
        box = view.boxes[box_id]
        if box.kind != "scope" or box.boxes or len(box.nodes) != 1 or box.parent is None:
            continue
        parent = view.boxes[box.parent]
        (node_id,) = box.nodes
        view.nodes[node_id].box = parent.id
        parent.boxes.remove(box_id)
        parent.nodes.append(node_id)
        del view.boxes[box_id]
