"""Function inlining: a graph whose function calls are replaced by the bodies they run.

    >>> flat = inline_calls(graph, [logits])
    >>> flat.graph_def                 # no PartitionedCall / StatefulPartitionedCall left
    >>> flat.tensors[logits]           # the name of that tensor in flat.graph_def

As TensorFlow's function inlining (grappler's function optimizer, ``InlineFunctionBody``) does it:
a call node ``c`` that runs function ``f`` becomes the nodes of ``f``'s body, named ``c/<node>``;
the body's arguments are the call's inputs (no copy: a consumer of argument ``k`` reads the
call's input ``k`` itself, so a ReadVariableOp of a captured variable reads the VarHandleOp of
the outer graph), and the call's consumers read the tensors the body returns. The body's nodes
that need nothing (constants) wait for the call's control inputs; a consumer waiting for the
call (``^c``) waits for the body's control outputs and the producers of its results. Calls in
bodies are inlined too, to ``gradreg.config.max_function_depth`` levels.

Calls are PartitionedCall, StatefulPartitionedCall and nodes whose op type is a function of the
library. Functional control flow (If, While, Case) keeps its branch and loop functions, as
inlining leaves them to the pass that lowers control flow; SymbolicGradient nodes stay too.
Only what the fetches need is kept, of the graph and of each body.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from gradreg.build.functions import call_attrs_of, function_graph, function_nesting
from gradreg.errors import describe_node
from gradreg.model.graph import FunctionLibrary, Graph, Operation, Tensor, calls_library_function
from gradreg.model.traversal import needed_ops, topological_order
from gradreg.proto import function_pb2, graph_pb2, node_def_pb2

CALL_TYPES = ("PartitionedCall", "StatefulPartitionedCall")


def is_call(op: Operation) -> bool:
    """Whether inlining replaces ``op`` by a function body: a (Stateful)PartitionedCall or a
    node whose op type is a library function."""
    return op.type in CALL_TYPES or calls_library_function(op)


@dataclasses.dataclass
class InlinedGraph:
    """What :func:`inline_calls` returns: the flat ``graph_def`` (with the library functions
    its remaining nodes still run), and where each tensor and op of the source graph went:
    ``tensors`` maps a source tensor to its tensor name (``node:k``) in ``graph_def``; ``ops`` maps a
    source op to the node names standing for it (a call: the nodes of its body that a
    control dependency on it waits for)."""
    graph_def: graph_pb2.GraphDef
    tensors: dict[Tensor, str]
    ops: dict[Operation, list[str]]


def inline_calls(graph: Graph, fetches: Sequence[Tensor | Operation], fed: Iterable[Tensor] = (),
                 names: Mapping[Operation, str] | None = None, scoped: bool = True,
                 reserved: Iterable[str] = ()) -> InlinedGraph:
    """The ops ``fetches`` need (not looking past the ``fed`` tensors, whose ops are kept) with
    every function call inlined; see the module docstring. ``names`` renames ops of ``graph``
    (not of function bodies) in the result: the caller's choice of names for its inputs and
    variables, kept as given (other nodes give way). Without ``scoped``, a body's nodes keep
    their own names (``digits_cnn_1/conv1_1/convolution`` rather than
    ``StatefulPartitionedCall_1/StatefulPartitionedCall/digits_cnn_1/conv1_1/convolution``),
    those already taken getting a ``_1`` suffix. No node but those ``names`` gives them takes the
    ``reserved`` names (the caller's for nodes it adds)."""
    fed = set(fed)
    fetch_ops = [f.op if isinstance(f, Tensor) else f for f in fetches]
    ops = set(needed_ops(fetch_ops, fed)) | {t.op for t in fed}
    order = topological_order(sorted(ops, key=lambda o: o.id), "graph to inline")
    inliner = _Inliner(graph.library, set((names or {}).values()) | set(reserved), scoped)
    scope = _Scope(prefix="", tensors={}, ops={}, waits=[])
    inliner.emit(order, scope, dict(names or {}))
    out = inliner.graph_def
    out.versions.CopyFrom(graph.versions)
    out.library.CopyFrom(used_functions(out.node, graph.library))
    return InlinedGraph(out, scope.tensors, scope.ops)


@dataclasses.dataclass
class _Scope:
    """One graph being emitted: the graph's or a function body's."""
    prefix: str                              # put before its node names
    tensors: dict[Tensor, str]               # its tensors -> names in the output
    ops: dict[Operation, list[str]]          # its ops -> nodes a control dependency waits for
    waits: list[str]                         # nodes its input-less nodes wait for (the call's control inputs)


class _Inliner:
    def __init__(self, library: FunctionLibrary, reserved: set[str], scoped: bool):
        self.library = library
        self.scoped = scoped
        self.graph_def = graph_pb2.GraphDef()
        self.reserved = reserved
        self.taken: set[str] = set()

    def emit(self, ops: Sequence[Operation], scope: _Scope, names: dict[Operation, str]) -> None:
        for op in ops:
            if op in scope.ops:          # a function argument, already bound to the call's input
                continue
            if is_call(op):
                self._inline(op, scope)
            else:
                self._copy(op, scope, names.get(op))

    def _name(self, wanted: str, given: bool) -> str:
        name, i = wanted, 1
        while name in self.taken or (not given and name in self.reserved):
            name, i = f"{wanted}_{i}", i + 1
        self.taken.add(name)
        return name

    def _controls(self, op: Operation, scope: _Scope) -> list[str]:
        found = [name for c in op.control_inputs for name in scope.ops[c]]
        if not op.inputs and not op.control_inputs:
            found += scope.waits
        return list(dict.fromkeys(found))

    def _copy(self, op: Operation, scope: _Scope, given: str | None) -> None:
        node = node_def_pb2.NodeDef()
        node.CopyFrom(op.node_def)
        node.name = self._name(given if given is not None else scope.prefix + op.name, given is not None)
        del node.input[:]
        node.input.extend(_input_text(scope.tensors[t]) for t in op.inputs)
        node.input.extend("^" + c for c in self._controls(op, scope))
        self.graph_def.node.append(node)
        for t in op.outputs:
            scope.tensors[t] = f"{node.name}:{t.value_index}"
        scope.ops[op] = [node.name]

    def _inline(self, op: Operation, scope: _Scope) -> None:
        caller = describe_node(scope.prefix + op.name, op.type)
        function = op.get_attr("f").name if op.type in CALL_TYPES else op.type
        with function_nesting(caller):
            body = function_graph(self.library, function, call_attrs_of(op, "f" if op.type in CALL_TYPES else None),
                                  caller)
            inner = _Scope(prefix=f"{scope.prefix}{op.name}/" if self.scoped else "", tensors={}, ops={},
                           waits=self._controls(op, scope) if op.control_inputs or not op.inputs else [])
            for arg, value in zip(body.inputs, op.inputs):
                inner.tensors[arg] = scope.tensors[value]
                inner.ops[arg.op] = [_node_of(scope.tensors[value])]
            wanted = [t.op for t in body.outputs] + list(body.control_outputs)
            order = topological_order(needed_ops(wanted, set(body.inputs)), caller)
            self.emit(order, inner, {})
        for t, result in zip(op.outputs, body.outputs):
            scope.tensors[t] = inner.tensors[result]
        waits = [n for o in body.control_outputs for n in inner.ops[o]]
        waits += [_node_of(inner.tensors[t]) for t in body.outputs]
        scope.ops[op] = list(dict.fromkeys(waits))


def _node_of(tensor_name: str) -> str:
    return tensor_name.rpartition(":")[0]


def _input_text(tensor_name: str) -> str:
    """A NodeDef's input string for a tensor: ``node`` for output 0, ``node:k`` otherwise."""
    return tensor_name[:-2] if tensor_name.endswith(":0") else tensor_name


def used_functions(nodes: Iterable[node_def_pb2.NodeDef], library: FunctionLibrary) -> function_pb2.FunctionDefLibrary:
    """The functions of ``library`` that ``nodes`` run (func attrs, op types), with the ones
    those run, and their GradientDefs."""
    pending = [name for node in nodes for name in _called(node, library)]
    kept: dict[str, function_pb2.FunctionDef] = {}
    while pending:
        name = pending.pop()
        fdef = library.get(name)
        if name in kept or fdef is None:
            continue
        kept[name] = fdef
        pending.extend(n for node in fdef.node_def for n in _called(node, library))
        gradient = library.gradient_function(name)
        if gradient is not None:
            pending.append(gradient)
    out = function_pb2.FunctionDefLibrary()
    out.function.extend(kept[n] for n in sorted(kept))
    for name in sorted(kept):
        gradient = library.gradient_function(name)
        if gradient is not None:
            out.gradient.add(function_name=name, gradient_func=gradient)
    return out


def _called(node: node_def_pb2.NodeDef, library: FunctionLibrary) -> list[str]:
    found = [node.op] if node.op in library else []
    for entry in node.attr:
        kind = entry.value.WhichOneof("value")
        if kind == "func":
            found.append(entry.value.func.name)
        elif kind == "list":
            found.extend(f.name for f in entry.value.list.func)
    return found


__all__ = ["CALL_TYPES", "InlinedGraph", "inline_calls", "is_call", "used_functions"]
