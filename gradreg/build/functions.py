"""Library functions: FunctionDef <-> Graph, and tracing Python functions into them.

Inside a FunctionDef, a node names its inputs ``arg`` (a function argument),
``node:out_arg:k`` (element k of output argument ``out_arg`` of ``node``) or ``^node``.
:func:`function_graph` turns a FunctionDef into a :class:`FunctionGraph` — an ordinary
Graph with a Placeholder per argument — so the interpreter, shape inference and the
gradient engine work on function bodies unchanged. :func:`graph_to_function_def` goes
back, for the functions gradreg adds to a library. (Running a function is the runtime's
job: gradreg.runtime.functions; its gradient is gradreg.autodiff.function_gradients.)

Functions share the library of the graph that calls them; attr placeholders in a body
(``T: {placeholder: "T"}``) take the values of the calling node's attrs.
"""
from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

from gradreg import config
from gradreg.build.builders import apply_op, convert_to_tensor, graph_of
from gradreg.errors import GraphError, InvalidGraphFunctionError, describe_node
from gradreg.model import attrs as attr_util
from gradreg.model import nest
from gradreg.model.graph import FunctionLibrary, Graph, Operation, Tensor, import_graph_def
from gradreg.model.traversal import needed_ops
from gradreg.proto import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, op_def_pb2, types_pb2
from gradreg.registry import get_registry

# The attr on a function body's resource argument (a Placeholder) naming the dtype of the
# variable it refers to: from the FunctionDef's ``handle_data`` (TensorFlow writes it for every
# captured variable) or from the captured VarHandleOp. Gradients of the body need it.
HANDLE_DTYPES_ATTR = "_handle_dtypes"


def handle_dtypes(t: Tensor) -> list[Any]:
    """The dtypes of the variable a resource tensor refers to when its op says so directly: a
    VarHandleOp's dtype, or a function argument's ``_handle_dtypes``; [] otherwise."""
    op = t.op
    if op.type == "VarHandleOp":
        return [op.get_attr("dtype")]
    if op.has_attr(HANDLE_DTYPES_ATTR):
        return list(op.get_attr(HANDLE_DTYPES_ATTR))
    return []


class FunctionGraph(Graph):
    """The body of a library function as a Graph: ``inputs`` are the argument Placeholders,
    ``outputs`` the returned tensors, ``control_outputs`` the ops it must run.

    While tracing (``outer_graph`` set), a tensor of the outer graph used by an op is
    *captured*: it becomes an extra Placeholder, and the call passes the outer tensor."""

    def __init__(self, outer_graph: Graph | None = None):
        super().__init__()
        self.name = ""
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.control_outputs: list[Operation] = []
        self.outer_graph = outer_graph
        self.captures: dict[Tensor, Tensor] = {}    # outer tensor -> its placeholder here

    def encloses(self, graph: Graph) -> bool:
        outer = self.outer_graph
        while outer is not None:
            if outer is graph:
                return True
            outer = getattr(outer, "outer_graph", None)
        return False

    def capture(self, t: Tensor) -> Tensor:
        found = self.captures.get(t)
        if found is None:
            outer = self.outer_graph
            if isinstance(outer, FunctionGraph) and t.graph is not outer:
                t = outer.capture(t)
            with self.as_default(), self.control_dependencies(None), self.in_control_flow_context(None):
                found = apply_op("Placeholder", dtype=t.known_dtype.base_dtype, shape=t.shape,
                                 name=f"captured_{t.op.name.replace('/', '_')}")
            if handle_dtypes(t):
                found.op.set_attr(HANDLE_DTYPES_ATTR, handle_dtypes(t), "list(type)")
            self.captures[t] = found
        return found


def _placeholder_node(name: str, dtype: int) -> node_def_pb2.NodeDef:
    node = node_def_pb2.NodeDef(name=name, op="Placeholder")
    entry = node.attr.add()
    entry.key = "dtype"
    entry.value.type = cast("types_pb2.DataType", dtype)
    return node


def _arg_shapes(fdef: function_pb2.FunctionDef) -> dict[int, Any]:
    """Argument shapes TensorFlow records in arg_attr["_output_shapes"], by argument index."""
    out = {}
    for entry in fdef.arg_attr:
        shapes = attr_util.get_entry(entry.value.attr, "_output_shapes")
        if shapes is not None and len(shapes.list.shape) == 1:
            out[entry.key] = shapes.list.shape[0]
    return out


def _substitute(value: attr_value_pb2.AttrValue, bound: dict[str, attr_value_pb2.AttrValue],
                where: str) -> attr_value_pb2.AttrValue:
    """Resolve attr placeholders (also inside func attrs) against the calling node's attrs."""
    kind = value.WhichOneof("value")
    if kind == "placeholder":
        found = bound.get(value.placeholder)
        if found is None:
            raise InvalidGraphFunctionError(f"{where}: attr placeholder '{value.placeholder}' is not bound "
                                            f"by the calling node")
        return found
    if kind == "func":
        out = attr_value_pb2.AttrValue()
        out.CopyFrom(value)
        for entry in out.func.attr:
            entry.value.CopyFrom(_substitute(entry.value, bound, where))
        return out
    return value


def _arg_types(arg: op_def_pb2.OpDef.ArgDef, bound: dict[str, attr_value_pb2.AttrValue], where: str) -> list[int]:
    """The DataType enum of each element of a signature argument."""
    if arg.type_list_attr:
        found = bound.get(arg.type_list_attr)
        if found is None:
            raise InvalidGraphFunctionError(f"{where}: attr '{arg.type_list_attr}' is not bound")
        return list(found.list.type)
    if arg.type:
        base = arg.type
    else:
        found = bound.get(arg.type_attr)
        if found is None:
            raise InvalidGraphFunctionError(f"{where}: attr '{arg.type_attr}' is not bound")
        base = found.type
    count = 1
    if arg.number_attr:
        found = bound.get(arg.number_attr)
        if found is None:
            raise InvalidGraphFunctionError(f"{where}: attr '{arg.number_attr}' is not bound")
        count = found.i
        if not 0 <= count <= config.max_op_arity:   # before building that many placeholders
            raise InvalidGraphFunctionError(f"{where}: argument '{arg.name}' has {count:,} elements (attr "
                                            f"'{arg.number_attr}'); the limit is {config.max_op_arity:,} "
                                            f"({config.how_to_raise('max_op_arity')})")
    return [base] * count


def function_graph(library: FunctionLibrary, name: str, call_attrs: dict[str, Any] | None = None,
                   caller: str = "") -> FunctionGraph:
    """Build the body of library function ``name`` as a FunctionGraph.

    ``call_attrs`` (attr name -> AttrValue) binds the function's attr placeholders;
    ``caller`` (e.g. "node 'f' (op PartitionedCall)") prefixes error messages.
    """
    where = f"{caller}: function '{name}'" if caller else f"function '{name}'"
    with function_nesting(where):
        return _function_graph(library, name, call_attrs, where)


_NESTING = threading.local()
# Python frames one level of function nesting may take (building a body instantiates the bodies
# it calls for shape inference; running one compiles the plans of those it calls).
_FRAMES_PER_LEVEL = 40


@contextlib.contextmanager
def function_nesting(where: str) -> Iterator[None]:
    """Count one more level of library functions being built or compiled inside one another;
    InvalidGraphFunctionError (naming ``where``) past ``gradreg.config.max_function_depth``.
    The interpreter's recursion limit is raised to fit the allowed depth."""
    depth = getattr(_NESTING, "depth", 0)
    limit = config.max_function_depth
    if depth >= limit:
        raise InvalidGraphFunctionError(f"{where}: library functions nested more than {limit} calls deep "
                                        f"({config.how_to_raise('max_function_depth')})")
    if depth == 0:
        _raise_recursion_limit(1000 + _FRAMES_PER_LEVEL * limit)
    _NESTING.depth = depth + 1
    try:
        yield
    finally:
        _NESTING.depth = depth
        if depth == 0:
            _restore_recursion_limit()


class _RecursionLimit:
    """The interpreter's recursion limit, raised while any thread builds or compiles nested
    functions and put back to the caller's when the last one is done."""
    lock = threading.Lock()
    users = 0
    saved = 0


def _raise_recursion_limit(needed: int) -> None:
    with _RecursionLimit.lock:
        if not _RecursionLimit.users:
            _RecursionLimit.saved = sys.getrecursionlimit()
        _RecursionLimit.users += 1
        if sys.getrecursionlimit() < needed:
            sys.setrecursionlimit(needed)


def _restore_recursion_limit() -> None:
    with _RecursionLimit.lock:
        _RecursionLimit.users -= 1
        if not _RecursionLimit.users:
            sys.setrecursionlimit(_RecursionLimit.saved)


def _function_graph(library: FunctionLibrary, name: str, call_attrs: dict[str, Any] | None,
                    where: str) -> FunctionGraph:
    fdef = library.get(name)
    if fdef is None:
        raise InvalidGraphFunctionError(f"{where} is not in the graph's function library")
    bound = dict(attr_util.entries_to_dict(fdef.attr))
    bound.update(call_attrs or {})
    graph_def = graph_pb2.GraphDef()
    arg_tensors, input_names = _argument_placeholders(fdef, bound, where, graph_def)
    resolver = _NameResolver(library, fdef, arg_tensors, bound, where)
    for node in fdef.node_def:
        copy = graph_def.node.add()
        copy.CopyFrom(node)
        for entry in copy.attr:
            entry.value.CopyFrom(_substitute(entry.value, bound, f"{where}, node '{node.name}'"))
        del copy.input[:]
        copy.input.extend(resolver.resolve(text, node.name) for text in node.input)
    fg = import_graph_def(graph_def, source=where, library=library, graph=FunctionGraph())
    assert isinstance(fg, FunctionGraph)
    fg.name = name
    fg.inputs = [fg.get_tensor(n) for n in input_names]
    rets = attr_util.entries_to_dict(fdef.ret)
    for arg in fdef.signature.output_arg:
        if arg.name not in rets:
            raise InvalidGraphFunctionError(f"{where}: output '{arg.name}' has no ret entry")
        count = len(_arg_types(arg, bound, where))
        ref = rets[arg.name]
        if count == 1:
            fg.outputs.append(fg.get_tensor(resolver.resolve(ref, f"ret {arg.name}")))
        else:
            for i in range(count):
                fg.outputs.append(fg.get_tensor(resolver.resolve(f"{ref}:{i}" if ":" not in ref else ref,
                                                                 f"ret {arg.name}")))
    control_rets = attr_util.entries_to_dict(fdef.control_ret)
    fg.control_outputs = [fg.get_operation(control_rets[n]) for n in fdef.signature.control_output
                          if n in control_rets]
    return fg


def _argument_placeholders(fdef: function_pb2.FunctionDef, bound: dict[str, attr_value_pb2.AttrValue], where: str,
                           graph_def: graph_pb2.GraphDef) -> tuple[dict[str, list[str]], list[str]]:
    """A Placeholder node in ``graph_def`` for each (element of each) argument: the node names of
    each argument, and the tensor names of all, in order."""
    arg_tensors: dict[str, list[str]] = {}
    node_names = {n.name for n in fdef.node_def}
    input_names: list[str] = []
    arg_shapes = _arg_shapes(fdef)
    for index, arg in enumerate(fdef.signature.input_arg):
        types = _arg_types(arg, bound, where)
        names = []
        for i, dtype in enumerate(types):
            node_name = arg.name if len(types) == 1 else f"{arg.name}_{i}"
            while node_name in node_names:
                node_name += "_arg"
            node_names.add(node_name)
            node = _placeholder_node(node_name, dtype)
            if arg.handle_data and dtype == types_pb2.DT_RESOURCE:
                entry = node.attr.add()
                entry.key = HANDLE_DTYPES_ATTR
                entry.value.list.type.extend(d.dtype for d in arg.handle_data)
            if len(types) == 1 and index in arg_shapes:
                entry = node.attr.add()
                entry.key = "shape"
                entry.value.shape.CopyFrom(arg_shapes[index])
            graph_def.node.append(node)
            names.append(node_name)
            input_names.append(f"{node_name}:0")
        arg_tensors[arg.name] = names
    return arg_tensors, input_names


class _NameResolver:
    """Translate FunctionDef input names to GraphDef ones ("node:flat_index")."""

    def __init__(self, library: FunctionLibrary, fdef: function_pb2.FunctionDef, arg_tensors: dict[str, list[str]],
                 bound: dict[str, Any], where: str):
        self.library = library
        self.nodes = {n.name: n for n in fdef.node_def}
        self.arg_tensors = arg_tensors
        self.bound = bound
        self.where = where
        self._ranges: dict[str, dict[str, tuple[int, int]]] = {}

    def resolve(self, text: str, node_name: str) -> str:
        if text.startswith("^"):
            target = text[1:]
            if target in self.arg_tensors:
                return "^" + self.arg_tensors[target][0]
            return text
        parts = text.split(":")
        if len(parts) == 1:
            if parts[0] in self.arg_tensors:
                return self.arg_tensors[parts[0]][0]
            return text   # a plain node name (output 0), as in GraphDefs
        if len(parts) > 3 or not parts[-1].isdigit():
            raise self._bad(text, node_name, "expected 'argument', 'argument:index' or 'node:output:index'")
        if len(parts) == 2:
            name, index = parts
            if name in self.arg_tensors:
                if int(index) >= len(self.arg_tensors[name]):
                    raise self._bad(text, node_name, f"argument '{name}' has {len(self.arg_tensors[name])} "
                                                     f"element(s)")
                return self.arg_tensors[name][int(index)]
            return text
        node, out_arg, index = parts[0], parts[1], parts[2]
        ranges = self._output_ranges(node, node_name)
        if out_arg not in ranges:
            raise InvalidGraphFunctionError(f"{self.where}, node '{node_name}': input '{text}' names output "
                                            f"'{out_arg}', which node '{node}' does not have")
        start, stop = ranges[out_arg]
        flat = start + int(index)
        if flat >= stop:
            raise InvalidGraphFunctionError(f"{self.where}, node '{node_name}': input '{text}' is out of range")
        return node if flat == 0 else f"{node}:{flat}"

    def _bad(self, text: str, node_name: str, why: str) -> InvalidGraphFunctionError:
        return InvalidGraphFunctionError(f"{self.where}, node '{node_name}': malformed input reference "
                                         f"'{text}': {why}")

    def _output_ranges(self, node: str, user: str) -> dict[str, tuple[int, int]]:
        found = self._ranges.get(node)
        if found is not None:
            return found
        node_def = self.nodes.get(node)
        if node_def is None:
            raise InvalidGraphFunctionError(f"{self.where}, node '{user}': input names missing node '{node}'")
        definition = get_registry().op_definition(node_def.op) or self.library.definition(node_def.op)
        if definition is None:
            raise InvalidGraphFunctionError(f"{self.where}: node '{node}' has unknown op type '{node_def.op}'")
        raw = {e.key: _substitute(e.value, self.bound, self.where) for e in node_def.attr}

        def attr(name: str) -> Any:
            if name in raw:
                return attr_util.from_attr_value(raw[name])
            spec = definition.attr_specs.get(name)
            if spec is None or not spec.has_default:
                raise InvalidGraphFunctionError(f"{self.where}: node '{node}' has no attr '{name}'")
            return spec.default
        found = self._ranges[node] = definition.output_arg_ranges(attr)
        return found


# -- Graph -> FunctionDef ----------------------------------------------------------------------

_ARG_NAME = re.compile(r"[^a-z0-9_]")


def _arg_name(text: str, used: set[str]) -> str:
    base = _ARG_NAME.sub("_", text.lower()).strip("_") or "arg"
    if base[0].isdigit():
        base = "arg_" + base
    name, i = base, 1
    while name in used:
        name = f"{base}_{i}"
        i += 1
    used.add(name)
    return name


def graph_to_function_def(graph: Graph, name: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
                          control_outputs: Sequence[Operation] = (),
                          output_names: Sequence[str] | None = None,
                          keep: Sequence[Operation] = ()) -> function_pb2.FunctionDef:
    """A FunctionDef computing ``outputs`` from ``inputs`` (Placeholders of ``graph``), with
    the ops the outputs need, and those ``keep`` needs, in TensorFlow's FunctionDef naming."""
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    used: set[str] = set()
    arg_of: dict[Tensor, str] = {}
    for t in inputs:
        arg = _arg_name(t.op.name, used)
        arg_of[t] = arg
        arg_def = fdef.signature.input_arg.add(name=arg, type=cast("types_pb2.DataType", t.known_dtype.base_dtype.enum))
        for dtype in handle_dtypes(t) if t.op.type == "Placeholder" else ():
            arg_def.handle_data.add(dtype=cast("types_pb2.DataType", dtype.enum))
    input_ops = {t.op for t in inputs}
    ops = [op for op in needed_ops([t.op for t in outputs] + list(control_outputs) + list(keep), set(inputs))
           if op not in input_ops]
    for op in ops:
        if op.type == "Placeholder" and op not in input_ops:
            raise GraphError(f"function '{name}': {describe_node(op.name, op.type)} is needed but is not "
                             f"one of the function's inputs")

    def ref(t: Tensor) -> str:
        if t in arg_of:
            return arg_of[t]
        return _output_ref(t)
    for op in ops:
        node = fdef.node_def.add()
        node.CopyFrom(op.node_def)
        del node.input[:]
        node.input.extend(ref(t) for t in op.inputs)
        node.input.extend("^" + c.name for c in op.control_inputs)
    out_used: set[str] = set()
    for i, t in enumerate(outputs):
        out_name = _arg_name(output_names[i] if output_names else f"output_{i}", out_used)
        fdef.signature.output_arg.add(name=out_name, type=cast("types_pb2.DataType", t.known_dtype.base_dtype.enum))
        entry = fdef.ret.add()
        entry.key = out_name
        entry.value = ref(t)
    for op in control_outputs:
        fdef.signature.control_output.append(op.name)
        control = fdef.control_ret.add()
        control.key = op.name
        control.value = op.name
    return fdef


def _output_ref(t: Tensor) -> str:
    """``node:out_arg:k`` for a tensor, from its op definition's output arguments."""
    op = t.op
    if op.definition is None:
        raise GraphError(f"cannot name output {t.name} in a function: op type '{op.type}' is unknown")
    for arg_name, (start, stop) in op.definition.output_arg_ranges(op.get_attr).items():
        if start <= t.value_index < stop:
            return f"{op.name}:{arg_name}:{t.value_index - start}"
    raise GraphError(f"cannot name output {t.name}: out of its op's range")


# -- running -----------------------------------------------------------------------------------

def call_attrs_of(op: Operation, func_attr: str | None = None) -> dict[str, Any]:
    """The attrs a call binds: those of the ``func`` attr (PartitionedCall's f), or the node's own
    (a node whose op type is the function's name)."""
    if func_attr is not None:
        func = attr_util.get_entry(op.node_def.attr, func_attr)
        return attr_util.entries_to_dict(func.func.attr) if func is not None else {}
    return attr_util.entries_to_dict(op.node_def.attr)


def call_attrs_key(call_attrs: dict[str, Any]) -> tuple[Any, ...]:
    """A hashable key of the attrs a call binds (compiled plans and gradient functions are kept
    per function and attrs)."""
    return tuple(sorted((k, v.SerializeToString(deterministic=True)) for k, v in call_attrs.items()))



def make_function(library: FunctionLibrary, name: str, input_types: Sequence[Any],
                  build: Any, input_shapes: Sequence[Any] | None = None,
                  output_names: Sequence[str] | None = None) -> str:
    """Trace ``build(*placeholders)`` (returning a list of tensors) into FunctionDef ``name`` and
    add it to ``library`` (unless a function of that name is already there). Returns the name."""
    if name in library:
        return name
    graph = FunctionGraph()
    graph.share_library(library)
    with graph.as_default():
        inputs = [apply_op("Placeholder", dtype=dtype, shape=(input_shapes[i] if input_shapes else None),
                           name=f"arg{i}") for i, dtype in enumerate(input_types)]
        outputs = list(build(*inputs))
    library.add(graph_to_function_def(graph, name, inputs, outputs, output_names=output_names))
    return name


class Function:
    """A Python function traced into a FunctionDef of the calling graph's library, called
    through PartitionedCall. Made by :func:`function`."""

    def __init__(self, fn: Any, name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "function")
        self._traces: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args: Any) -> Any:
        # Arguments may be nested structures (gradreg.nest) of tensors; a None leaf is passed as None.
        leaves = nest.flatten(args)
        graph = graph_of(leaves)
        with graph.as_default():
            tensors = [convert_to_tensor(a) for a in leaves if a is not None]
        key = (id(graph), nest.structure_key(args), tuple(a is None for a in leaves),
               tuple((a.dtype, a.shape.dims) for a in tensors))
        trace = self._traces.get(key)
        if trace is None:
            trace = self._traces[key] = self._trace(graph, args, tensors)
        name, captured, structure, present, out_types, out_shapes = trace
        with graph.as_default():
            out = apply_op("PartitionedCall", tensors + captured, Tout=out_types,
                           f=attr_value_pb2.NameAttrList(name=name), name=self.name)
        flat = [out] if isinstance(out, Tensor) else list(out)
        for t, shape in zip(flat, out_shapes):
            t.set_shape(shape)
        outputs = iter(flat)
        return nest.pack_sequence_as(structure, [next(outputs) if p else None for p in present])

    def _trace(self, graph: Graph, args: tuple[Any, ...], tensors: list[Tensor]) -> tuple[Any, ...]:
        body = FunctionGraph(outer_graph=graph)
        body.share_library(graph.library)
        with body.as_default():
            inputs = [apply_op("Placeholder", dtype=a.known_dtype.base_dtype, shape=a.shape, name=f"arg{i}")
                      for i, a in enumerate(tensors)]
            given = iter(inputs)
            packed = nest.pack_sequence_as(args, [None if a is None else next(given) for a in nest.flatten(args)])
            result = self.fn(*packed)
            # None leaves of the result stay None (as TensorFlow's functions return them).
            result_leaves = nest.flatten(result)
            outputs = [convert_to_tensor(r) for r in result_leaves if r is not None]
        name = graph.unique_name(f"__gradreg_{self.name}", mark_as_used=True).replace("/", "_")
        captured = list(body.captures)
        fdef = graph_to_function_def(body, name, inputs + [body.captures[t] for t in captured], outputs)
        graph.library.add(fdef)
        present = [r is not None for r in result_leaves]
        return (name, captured, result, present, [t.known_dtype.base_dtype for t in outputs],
                [t.shape for t in outputs])


def function(fn: Any = None, *, name: str | None = None) -> Any:
    """Decorator: trace a Python function of tensors into a library function.

    >>> @gradreg.function
    ... def layer(x, w):
    ...     return gradreg.tanh(gradreg.matmul(x, w))
    >>> y = layer(x, w)        # a PartitionedCall node; the body is a FunctionDef in the library

    It is traced once per graph, argument structure and argument dtypes/shapes. Arguments and
    results may be nested structures of tensors (gradreg.nest: lists, tuples, dicts,
    namedtuples); a None leaf stays None. Tensors of the calling graph the body uses become
    extra arguments. Gradients go through SymbolicGradient (or a gradient
    registered for the function's name).
    """
    if fn is None:
        return lambda f: Function(f, name)
    return Function(fn, name)
