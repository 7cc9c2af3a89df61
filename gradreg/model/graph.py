"""The in-memory graph: :class:`Graph`, :class:`Operation`, :class:`Tensor` over NodeDefs.

Each Operation keeps the NodeDef it was read from or built as, untouched, so a graph
loaded and written back is byte-identical. Around it the model adds what NodeDefs
lack: resolved inputs and consumers, output dtypes and static shapes (from the op
definition table), name scopes, control dependencies and gradient override maps.

    >>> g = Graph()
    >>> with g.as_default():
    ...     x = gradreg.placeholder(gradreg.float32, [None, 3], name="x")
    ...     y = gradreg.reduce_sum(x * 2.0, axis=1)
    >>> g.get_tensor("x:0").shape, y.shape
    (TensorShape([None, 3]), TensorShape([None]))
"""
from __future__ import annotations

import contextlib
import gc
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from google.protobuf import message as protobuf_message

from gradreg import config, deadline
from gradreg.errors import (
    GraphError,
    GraphFileError,
    ShapeError,
    TypeMismatchError,
    UnknownOpError,
    describe_node,
    shown,
)
from gradreg.model import attrs as attr_util
from gradreg.model import catalog
from gradreg.model.dtypes import DType
from gradreg.model.loop_shapes import refine_loop_shapes
from gradreg.model.node_bytes import read_head, read_parsed, split_graph_def
from gradreg.model.opdefs import LIBRARY_FUNCTION, OpDefinition, definition_from_op_def
from gradreg.model.shape_inference import NOT_COMPUTED, infer_shapes
from gradreg.model.shapes import TensorShape
from gradreg.model.traversal import topological_order
from gradreg.progress import task
from gradreg.proto import function_pb2, graph_pb2, node_def_pb2

_MISSING = object()
_VALID_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$")
_VALID_SCOPE = re.compile(r"^[A-Za-z0-9_.\\/>-]*$")

_NO_SPECS: dict[str, Any] = {}
# Attr kinds whose Python values builders pass in the form get_attr returns (bytes for strings,
# DType, TensorShape, ...), so create_op can keep them instead of decoding the NodeDef again.
_CACHEABLE_KINDS = frozenset({"type", "int", "bool", "float", "shape", "list(type)", "list(int)"})

# ---------------------------------------------------------------------------------
# Tensor
# ---------------------------------------------------------------------------------

class Tensor:
    """One output of an Operation: ``op.outputs[value_index]``, named ``"op_name:index"``."""

    # ``shape`` and ``graph`` are plain attributes (read on every op built and every kernel
    # planned): change the shape through set_shape / set_static_shape.
    __slots__ = ("op", "value_index", "dtype", "shape", "graph", "_consumers", "_const", "__weakref__")

    def __init__(self, op: Operation, value_index: int, dtype: DType | None):
        self.op = op
        self.value_index = value_index
        self.dtype = dtype
        self.shape: TensorShape = _UNKNOWN_SHAPE
        self.graph: Graph = op.graph
        self._consumers: list[Operation] = []
        self._const = NOT_COMPUTED   # memo of shape_inference.constant_value

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.value_index}"

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def device(self) -> str:
        """The device of the op producing this tensor (as TensorFlow's Tensor.device)."""
        return self.op.device

    def set_shape(self, shape: Any) -> None:
        """Refine the static shape (it must stay compatible with what is known)."""
        try:
            self.shape = self.shape.merge_with(shape)
        except ShapeError as exc:
            raise ShapeError(f"{self.name}: {exc}") from None

    @property
    def known_dtype(self) -> DType:
        """The dtype, for code that needs one: GraphError if it is unknown (an output of an op
        type no plugin defines)."""
        dtype = self.dtype
        if dtype is None:
            raise GraphError(f"the dtype of {self.name} is unknown: op type '{self.op.type}' has no definition")
        return dtype

    def set_static_shape(self, shape: TensorShape) -> None:
        """Replace the static shape: what shape inference found, or a loop variable's shape
        invariant (which may be less specific than its initial value's shape)."""
        self.shape = shape

    def consumers(self) -> list[Operation]:
        """Operations that take this tensor as a data input (once per use)."""
        return list(self._consumers)

    def consumers_view(self) -> Sequence[Operation]:
        """The consumers without a copy: the live list, for traversals, which must not change it."""
        return self._consumers

    def memoized_value(self) -> Any:
        """The constant value gradreg.model.shape_inference.constant_value found for this tensor
        (None: not constant), or NOT_COMPUTED if it has not looked yet."""
        return self._const

    def memoize_value(self, value: Any) -> None:
        """Record the tensor's constant value (None: not a constant) for constant_value."""
        self._const = value

    def __repr__(self) -> str:
        dt = self.dtype.name if self.dtype is not None else "?"
        return f"<gradreg.Tensor '{self.name}' shape={self.shape} dtype={dt}>"

    # Tensors compare and hash by identity, as in TF1 (object's own __eq__ and __hash__, which
    # cost nothing in dicts and sets: a graph's traversals are made of them).

    def __bool__(self) -> bool:
        raise TypeError("a symbolic gradreg.Tensor has no truth value; use gradreg.cond or a Session")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a symbolic gradreg.Tensor is not iterable; use gradreg.unstack")

    def __len__(self) -> int:
        raise TypeError("a symbolic gradreg.Tensor has no len(); use gradreg.shape")

    # Arithmetic operators (x + y, x[1:], ...) are installed by the build layer
    # (gradreg.build.operators), which builds their ops.
    if TYPE_CHECKING:   # what gradreg.build.operators installs, for type checkers
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...

_UNKNOWN_SHAPE = TensorShape(None)

# ---------------------------------------------------------------------------------
# Operation
# ---------------------------------------------------------------------------------

class Operation:
    """A node of the graph, wrapping its NodeDef.

    An op read from a file keeps the NodeDef it came with, untouched: as its serialized bytes
    (gradreg.model.node_bytes), parsed the first time something asks for the NodeDef; nodes
    whose attrs are the same bytes share one dict of their decoded values (``_SharedAttrs``).
    An op built in Python keeps its attrs as values (``_lazy_attrs``: name -> (value, attr
    kind)) and writes its NodeDef the first time something asks for it (saving the graph, most
    often) — building NodeDefs is a large part of what graph and gradient construction would
    otherwise cost.
    """

    # ``inputs`` (a tuple) is a plain attribute, read in every traversal: change it with replace_input.
    __slots__ = ("graph", "_node_def", "_lazy_attrs", "name", "type", "inputs", "_control_inputs", "outputs",
                 "id", "definition", "_attr_cache", "_control_outputs", "_context", "__weakref__")

    def __init__(self, graph: Graph, name: str, op_type: str, op_id: int, definition: Any,
                 node_def: node_def_pb2.NodeDef | bytes | None = None,
                 lazy_attrs: dict[str, tuple[Any, str | None]] | None = None):
        self.graph = graph
        self._node_def = node_def      # a NodeDef, or its bytes until asked for (read from a file)
        self._lazy_attrs = lazy_attrs
        self.name: str = name
        self.type: str = op_type
        self.inputs: tuple[Tensor, ...] = ()
        # Control edges: a shared empty tuple until the first one (most nodes have none).
        self._control_inputs: list[Operation] | tuple[()] = ()
        self._control_outputs: list[Operation] | tuple[()] = ()
        self.outputs: list[Tensor] = []
        self.id = op_id                # creation order: unique in the graph, increasing
        self.definition = definition   # OpDefinition or None for an unknown op type
        self._attr_cache: dict[str, Any] | None = None
        self._context = None           # the control-flow context it was created in (gradreg.build.control_flow)

    @property
    def node_def(self) -> node_def_pb2.NodeDef:
        node_def = self._node_def
        if isinstance(node_def, bytes):
            parsed = self._node_def = node_def_pb2.NodeDef.FromString(node_def)
            return parsed
        if node_def is None:
            node_def = self._node_def = node_def_pb2.NodeDef(
                name=self.name, op=self.type,
                input=[_input_string(t) for t in self.inputs] + ["^" + c.name for c in self._control_inputs])
            entries = node_def.attr
            for key, (value, kind) in (self._lazy_attrs or {}).items():
                entry = entries.add()
                entry.key = key
                attr_util.fill_attr_value(entry.value, value, kind)
            self._lazy_attrs = None
        return node_def

    # -- structure -------------------------------------------------------------
    @property
    def control_inputs(self) -> list[Operation]:
        return list(self._control_inputs)

    def _add_control_output(self, op: Operation) -> None:
        outputs = self._control_outputs
        if isinstance(outputs, tuple):
            self._control_outputs = [op]
        else:
            outputs.append(op)

    @property
    def control_outputs(self) -> list[Operation]:
        """Operations with a control dependency on this one."""
        return list(self._control_outputs)

    @property
    def control_flow_context(self) -> Any:
        """The control-flow context (gradreg.build.control_flow) the op was created in, or None."""
        return self._context

    def set_control_flow_context(self, context: Any) -> None:
        """Move the op to another context (an Exit's value belongs to the enclosing context)."""
        self._context = context

    @property
    def device(self) -> str:
        return self.node_def.device

    @property
    def op_def(self) -> Any:
        """The OpDef proto of the op's type (GraphError if gradreg has no definition of it)."""
        if self.definition is None:
            raise GraphError(f"{describe_node(self.name, self.type)}: no installed plugin defines this op type")
        return self.definition.op_def

    def values(self) -> tuple[Tensor, ...]:
        return tuple(self.outputs)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def output(self, index: int) -> Tensor:
        """Output ``index``; for an op type gradreg does not know, outputs appear as referenced."""
        if index < len(self.outputs):
            return self.outputs[index]
        if self.definition is None and index >= 0:
            while len(self.outputs) <= index:
                self.outputs.append(Tensor(self, len(self.outputs), None))
            return self.outputs[index]
        raise GraphError(f"{describe_node(self.name, self.type)} has {len(self.outputs)} outputs; "
                         f"output {index} does not exist")

    # -- attrs -------------------------------------------------------------------
    def get_attr(self, name: str) -> Any:
        """The attr's value in Python form (see gradreg.model.attrs); the op definition's default if
        the NodeDef omits it; GraphError if neither has it."""
        cache = self._attr_cache
        if cache is None:
            cache = self._attr_cache = {}
        value = cache.get(name, _MISSING)
        if value is not _MISSING:
            return value
        raw = attr_util.get_entry(self._attr_entries(), name)
        if raw is not None:
            value = attr_util.from_attr_value(raw, describe_node(self.name, self.type))
            if value is None and self.definition is not None:
                spec = self.definition.attr_specs.get(name)
                if spec is not None and spec.kind.startswith("list("):
                    value = []     # an empty AttrValue is an empty list, as in TensorFlow
        else:
            spec = self.definition.attr_specs.get(name) if self.definition is not None else None
            if spec is None or not spec.has_default:
                raise GraphError(f"{describe_node(self.name, self.type)} has no attr '{name}'")
            value = spec.default
        cache[name] = value
        return value

    def has_attr(self, name: str) -> bool:
        if self._lazy_attrs is not None:
            return name in self._lazy_attrs
        return attr_util.get_entry(self._attr_entries(), name) is not None

    def attr_names(self) -> list[str]:
        if self._lazy_attrs is not None:
            return list(self._lazy_attrs)
        return [e.key for e in self._attr_entries()]

    def _attr_entries(self) -> Any:
        """The NodeDef's attr entries: those its shared decoded attrs were read from, when it has
        them (its own NodeDef then stays unparsed), else its NodeDef's."""
        cache = self._attr_cache
        if type(cache) is _SharedAttrs:
            return cache.entries
        return self.node_def.attr

    def cached_attr(self, name: str) -> Any:
        """The attr's Python value if it is at hand without decoding (a builder passed it, or
        get_attr decoded it before), else None."""
        cache = self._attr_cache
        return None if cache is None else cache.get(name)

    def cache_attr(self, name: str, value: Any) -> None:
        """Record the Python form of an attr the caller already has (get_attr then returns it
        without decoding the NodeDef): a Const's array, written to a proto only when saved."""
        cache = self._attr_cache
        if cache is None or type(cache) is _SharedAttrs:   # shared: this op's own from now on
            cache = self._attr_cache = {} if cache is None else dict(cache)
        cache[name] = value

    def tensor_attr_proto(self, name: str) -> Any:
        """A tensor attr as its TensorProto, undecoded (None if absent)."""
        lazy = self._lazy_attrs
        if lazy is not None:
            value = lazy.get(name)
            if value is None:
                return None
            if hasattr(value[0], "tensor_shape"):
                return value[0]
        entry = attr_util.get_entry(self._attr_entries(), name)
        return None if entry is None else entry.tensor

    # -- mutation ------------------------------------------------------------------
    def set_attr(self, name: str, value: Any, attr_type: str | None = None) -> None:
        """Set attr ``name`` (encoded as ``attr_type``, else as the value suggests)."""
        if self._lazy_attrs is not None:
            self._lazy_attrs[name] = (value, attr_type)
        else:
            attr_util.set_entry(self.node_def.attr, name, attr_util.to_attr_value(value, attr_type))
        self._attr_cache = None
        self.graph.mark_mutated()

    def add_control_input(self, op: Operation) -> None:
        """Make this op run after ``op`` (no-op if it already does)."""
        if op in self._control_inputs:
            return
        self._control_inputs = [*self._control_inputs, op]
        op._add_control_output(self)
        if self._node_def is not None:
            self.node_def.input.append("^" + op.name)
        self.graph.mark_mutated()

    def replace_input(self, index: int, tensor: Tensor) -> None:
        """Make ``tensor`` data input ``index`` (a loop's back edge is closed this way)."""
        old = self.inputs[index]
        old._consumers.remove(self)
        inputs = list(self.inputs)
        inputs[index] = tensor
        self.inputs = tuple(inputs)
        tensor._consumers.append(self)
        if self._node_def is not None:
            self.node_def.input[index] = _input_string(tensor)
        self.graph.mark_mutated()

    def __repr__(self) -> str:
        return f"<gradreg.Operation '{self.name}' type={self.type}>"

    # Operations compare and hash by identity (object's own __eq__ and __hash__, as Tensor's).

class _SharedAttrs(dict[str, Any]):
    """The decoded attrs of imported nodes whose attrs are the same bytes: one dict for them all
    (gradreg.model.node_bytes), with the attr entries they are decoded from, and what the import
    works out once for them all: their output dtypes, the dtypes their inputs must have (None
    until the first of them is checked)."""

    __slots__ = ("entries", "message", "output_dtypes", "input_dtypes")

    def __init__(self, message: node_def_pb2.NodeDef):
        super().__init__()
        self.message = message          # keeps the entries' message alive
        self.entries = message.attr
        self.output_dtypes: list[DType] = []
        self.input_dtypes: list[DType] | None = None


def calls_library_function(op: Operation) -> bool:
    """Whether ``op``'s type is the name of a function in its graph's library."""
    definition = op.definition
    return definition is not None and definition.is_library_function


def _input_string(tensor: Tensor) -> str:
    return tensor.op.name if tensor.value_index == 0 else f"{tensor.op.name}:{tensor.value_index}"

def parse_input_name(text: str) -> tuple[str, int, bool]:
    """Split a NodeDef input string into (node name, output index, is_control)."""
    if text.startswith("^"):
        return text[1:], -1, True
    name, sep, port = text.rpartition(":")
    if sep and port.isdigit():
        return name, int(port), False
    return text, 0, False

def parse_tensor_name(text: str) -> tuple[str, int]:
    """``"x:1"`` -> ("x", 1); ``"x"`` -> ("x", 0)."""
    name, port, control = parse_input_name(text)
    if control:
        raise GraphError(f"'{text}' names a control input, not a tensor")
    return name, port

# ---------------------------------------------------------------------------------
# Function library
# ---------------------------------------------------------------------------------

class FunctionLibrary:
    """The graph's FunctionDefLibrary, with lookup by name. Functions stay in proto form."""

    def __init__(self, proto: function_pb2.FunctionDefLibrary):
        self.proto = proto
        self._by_name = {f.signature.name: f for f in proto.function}
        self._gradients = {g.function_name: g.gradient_func for g in proto.gradient}
        self._registered = {g.registered_op_type: g.gradient_func for g in proto.registered_gradients}
        self._definitions: dict[str, Any] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, name: str) -> function_pb2.FunctionDef | None:
        return self._by_name.get(name)

    def gradient_function(self, name: str) -> str | None:
        """The function the library's GradientDef names as ``name``'s gradient, if any."""
        return self._gradients.get(name)

    def registered_gradient(self, op_type: str) -> str | None:
        """The function the library's RegisteredGradient names as the gradient of the nodes
        whose ``_gradient_op_type`` is ``op_type`` (a custom gradient TensorFlow saved with a
        SavedModel), if any."""
        return self._registered.get(op_type)

    def registered_gradient_functions(self) -> list[str]:
        """The functions the library's RegisteredGradients name."""
        return list(self._registered.values())

    def add(self, fdef: function_pb2.FunctionDef) -> None:
        name = fdef.signature.name
        existing = self._by_name.get(name)
        if existing is not None:
            if existing.SerializeToString(deterministic=True) == fdef.SerializeToString(deterministic=True):
                return
            raise GraphError(f"function '{name}' is already defined in the graph's library with a different body")
        self.proto.function.append(fdef)
        self._by_name[name] = self.proto.function[-1]

    def add_gradient(self, function_name: str, gradient_func: str) -> None:
        if self._gradients.get(function_name) == gradient_func:
            return
        self.proto.gradient.add(function_name=function_name, gradient_func=gradient_func)
        self._gradients[function_name] = gradient_func

    def definition(self, name: str) -> OpDefinition | None:
        """An OpDefinition for calling function ``name`` as an op type, or None."""
        if name not in self._by_name:
            return None
        found = self._definitions.get(name)
        if found is None:
            found = self._definitions[name] = definition_from_op_def(
                self._by_name[name].signature, plugin=LIBRARY_FUNCTION)
        return found

# ---------------------------------------------------------------------------------
# Graph
# ---------------------------------------------------------------------------------

class _NameScope:
    """The context manager of Graph.name_scope (a class: entered once per op differentiated)."""

    __slots__ = ("graph", "scope", "saved")

    def __init__(self, graph: Graph, scope: str):
        self.graph = graph
        self.scope = scope

    def __enter__(self) -> str:
        self.saved = self.graph._name_stack
        self.graph._name_stack = self.scope
        return self.scope + "/" if self.scope else ""

    def __exit__(self, *exc: object) -> None:
        self.graph._name_stack = self.saved


class _DefaultStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[Graph] = []

_default_stack = _DefaultStack()
_global_default_graph: Graph | None = None

def get_default_graph() -> Graph:
    """The innermost graph entered with ``as_default()``, else the global default graph."""
    if _default_stack.stack:
        return _default_stack.stack[-1]
    global _global_default_graph
    if _global_default_graph is None:
        _global_default_graph = Graph()
    return _global_default_graph

def reset_default_graph() -> None:
    """Replace the global default graph with an empty one."""
    global _global_default_graph
    if _default_stack.stack:
        raise GraphError("reset_default_graph() inside a `with graph.as_default()` block")
    _global_default_graph = Graph()

class Graph:
    """A dataflow graph of Operations. See the module docstring."""

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._ops_by_name: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._names_pending = False   # imported names not yet in _names_in_use (_claim_imported_names)
        self._name_stack = ""
        self._control_dependencies: list[list[Operation]] = []
        self._gradient_override_map: dict[str, str] = {}
        self._attr_scope: dict[str, tuple[Any, str | None]] = {}   # attrs every new op gets (attr_scope)
        self._template = graph_pb2.GraphDef()
        self._library: FunctionLibrary | None = None
        self.collections: dict[str, list[Any]] = {}
        self.seed: int | None = None
        self._version = 0           # bumped when existing ops change (plans are cached per version)
        self._last_id = 0
        self.resources: dict[str, Any] = {}   # per-graph state owned by plugins
        # The file or directory the graph was read from (set by the loaders): its file ops may
        # read there and nowhere else the caller did not grant (gradreg.file_access).
        self.model_root: str | None = None
        # Rules of gradreg.custom_gradient, by the name their nodes' _gradient_op_type attr gives.
        self.custom_gradients: dict[str, Callable[..., Any]] = {}
        # The Python object (gradreg.training.Variable) standing for each variable op: filled by
        # the training layer, read by custom_gradient to find the variables a function reads.
        self.variables_by_op: dict[Operation, Any] = {}
        self._control_flow_context = None     # set while building inside cond/while_loop
        self._tensor_aliases: dict[str, Tensor] = {}   # other formats' value names (ONNX) -> tensors

    @property
    def version(self) -> int:
        """Bumped whenever an existing op changes (an input replaced, an attr set), so compiled
        plans can tell they are stale; adding ops does not change it."""
        return self._version

    def mark_mutated(self) -> None:
        """Record that existing ops changed (see ``version``)."""
        self._version += 1

    # -- control-flow context ------------------------------------------------------
    @property
    def control_flow_context(self) -> Any:
        """The cond branch or loop frame (gradreg.build.control_flow) new ops are created in, or None."""
        return self._control_flow_context

    @contextlib.contextmanager
    def in_control_flow_context(self, context: Any) -> Iterator[Any]:
        """Create ops in ``context`` (None: outside every context) until the block ends."""
        saved = self._control_flow_context
        self._control_flow_context = context
        try:
            yield context
        finally:
            self._control_flow_context = saved

    # -- default graph -------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        _default_stack.stack.append(self)
        try:
            yield self
        finally:
            _default_stack.stack.pop()

    # -- graphs inside graphs (library functions being traced) --------------------
    def encloses(self, graph: Graph) -> bool:
        """Whether this graph is traced inside ``graph`` (a function body inside its caller), so
        its ops may use ``graph``'s tensors. A plain graph encloses nothing."""
        return False

    def capture(self, t: Tensor) -> Tensor:
        """``t``, of an enclosing graph, made usable here (gradreg.build.functions.FunctionGraph
        turns it into an argument); a plain graph captures nothing."""
        raise GraphError(f"{t.name} belongs to another graph")

    # -- lookup ------------------------------------------------------------------
    def get_operations(self) -> list[Operation]:
        return list(self._ops)

    def operations(self) -> Sequence[Operation]:
        """The operations in creation (GraphDef) order, without copying."""
        return self._ops

    def __len__(self) -> int:
        return len(self._ops)

    def __contains__(self, name: str) -> bool:
        return name in self._ops_by_name

    def get_operation(self, name: str) -> Operation:
        """The operation called ``name``; GraphError naming it if there is none."""
        if isinstance(name, Operation):
            return name
        op = self._ops_by_name.get(name)
        if op is None:
            if ":" in name:
                raise GraphError(f"'{name}' looks like a tensor name; get_operation wants an op name")
            raise GraphError(f"the graph has no operation named '{name}'")
        return op

    def get_tensor(self, name: str | Tensor) -> Tensor:
        """The tensor ``"op:index"`` (``"op"`` alone means output 0), or the tensor an alias
        names (:meth:`add_tensor_alias`; ``"alias:0"`` names it too)."""
        if isinstance(name, Tensor):
            return name
        aliased = self._tensor_aliases.get(name)
        if aliased is not None:
            return aliased
        op_name, index = parse_tensor_name(name)
        op = self._ops_by_name.get(op_name)
        if op is None:
            aliased = self._tensor_aliases.get(op_name) if index == 0 and name.endswith(":0") else None
            if aliased is not None:
                return aliased
            raise GraphError(f"the graph has no tensor '{name}': no operation named '{op_name}'")
        return op.output(index)

    def add_tensor_alias(self, name: str, tensor: Tensor) -> None:
        """Let ``name`` — a value name of another format, such as ONNX's ``"input.1"`` or
        ``"onnx::Conv_12"`` — name ``tensor`` wherever a tensor name is accepted (get_tensor,
        feeds, fetches, the command line). An alias is looked up before node names."""
        if tensor.graph is not self:
            raise GraphError(f"alias '{name}': {tensor.name} belongs to another graph")
        existing = self._tensor_aliases.get(name)
        if existing is not None and existing is not tensor:
            raise GraphError(f"alias '{name}' already names {existing.name}, not {tensor.name}")
        self._tensor_aliases[name] = tensor

    def tensor_aliases(self) -> dict[str, Tensor]:
        """alias -> tensor, in the order they were added."""
        return dict(self._tensor_aliases)

    get_tensor_by_name = get_tensor
    get_operation_by_name = get_operation     # TensorFlow's names for them

    def as_graph_element(self, obj: Any) -> Tensor | Operation:
        """Resolve a Tensor, Operation or name ("x:0" is a tensor, "x" an operation)."""
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise GraphError(f"{obj!r} belongs to another graph")
            return obj
        if isinstance(obj, str):
            if ":" in obj or obj in self._tensor_aliases:
                return self.get_tensor(obj)
            return self.get_operation(obj)
        raise TypeError(f"cannot interpret {obj!r} as a graph element")

    @property
    def library(self) -> FunctionLibrary:
        if self._library is None:
            self._library = FunctionLibrary(self._template.library)
        return self._library

    def share_library(self, library: FunctionLibrary) -> None:
        """Use another graph's function library (a function body shares its caller's)."""
        self._library = library

    @property
    def versions(self) -> Any:
        return self._template.versions

    # -- names ---------------------------------------------------------------------
    def get_name_scope(self) -> str:
        return self._name_stack

    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """``name`` inside the current scope, suffixed _1, _2, ... if already taken (case-blind)."""
        if self._names_pending:
            self._claim_imported_names()
        if self._name_stack:
            name = f"{self._name_stack}/{name}"
        key = name.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count:
            base_key = key
            while f"{base_key}_{count}" in self._names_in_use:
                count += 1
            if mark_as_used:
                self._names_in_use[f"{base_key}_{count}"] = 1
            name = f"{name}_{count}"
        return name

    def name_scope(self, name: str | None) -> _NameScope:
        """Nest op names under ``name`` (made unique); ``"a/"`` re-enters scope "a" exactly;
        ``None`` or ``""`` resets to the top level. A context manager yielding the scope
        ("a/", or "" at the top level)."""
        if not name:
            new = ""
        elif name[-1] == "/":
            new = name[:-1]
        else:
            if not _VALID_SCOPE.match(name):
                raise GraphError(f"'{name}' is not a valid name scope")
            new = self.unique_name(name)
        return _NameScope(self, new)

    # -- context managers ------------------------------------------------------------
    @contextlib.contextmanager
    def control_dependencies(self, control_inputs: Iterable[Any] | None) -> Iterator[None]:
        """Ops created inside run after ``control_inputs``; ``None`` clears outer dependencies."""
        if control_inputs is None:
            saved = self._control_dependencies
            self._control_dependencies = []
            try:
                yield
            finally:
                self._control_dependencies = saved
            return
        ops = []
        for c in control_inputs:
            element = self.as_graph_element(c) if isinstance(c, str) else c
            element = element.op if isinstance(element, Tensor) else element
            if not isinstance(element, Operation):
                raise TypeError(f"control dependency {c!r} is not an Operation or Tensor")
            ops.append(element)
        self._control_dependencies.append(ops)
        try:
            yield
        finally:
            self._control_dependencies.pop()

    @contextlib.contextmanager
    def gradient_override_map(self, op_type_map: dict[str, str]) -> Iterator[None]:
        """Ops of the mapped types created inside get attr ``_gradient_op_type`` naming the
        gradient to use instead (resolved through the gradient registry when differentiating)."""
        if not isinstance(op_type_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in op_type_map.items()):
            raise TypeError("gradient_override_map takes a dict of op type strings")
        saved = dict(self._gradient_override_map)
        self._gradient_override_map.update(op_type_map)
        try:
            yield
        finally:
            self._gradient_override_map = saved

    @contextlib.contextmanager
    def attr_scope(self, attrs: dict[str, tuple[Any, str | None]]) -> Iterator[None]:
        """Ops created inside get ``attrs`` (name -> (value, attr kind)) written on their NodeDef,
        an inner scope's value replacing an outer one's (TensorFlow's ``Graph._attr_scope``).
        Names should start with ``_``, which TensorFlow's importer accepts on any op: gradients()
        marks each rule's nodes with ``_gradreg_rule`` this way."""
        saved = self._attr_scope
        self._attr_scope = {**saved, **attrs}
        try:
            yield
        finally:
            self._attr_scope = saved

    def _scoped_attrs(self, op_type: str) -> dict[str, tuple[Any, str | None]]:
        """The attrs a new op of ``op_type`` gets from attr_scope and gradient_override_map."""
        found = dict(self._attr_scope)
        mapped = self._gradient_override_map.get(op_type)
        if mapped is not None:
            found.update(_gradient_override_attrs(mapped))
        return found

    def _current_control_inputs(self, data_inputs: Sequence[Tensor]) -> list[Operation]:
        if not self._control_dependencies:
            return []
        producers = {t.op for t in data_inputs}
        out: list[Operation] = []
        for group in self._control_dependencies:
            for op in group:
                if op not in producers and op not in out:
                    out.append(op)
        return out

    # -- collections -------------------------------------------------------------
    def add_to_collection(self, name: str, value: Any) -> None:
        self.collections.setdefault(name, []).append(value)

    def get_collection(self, name: str, scope: str | None = None) -> list[Any]:
        items = self.collections.get(name, [])
        if scope is None:
            return list(items)
        pattern = re.compile(scope)
        return [i for i in items if pattern.match(getattr(i, "name", ""))]

    def get_collection_ref(self, name: str) -> list[Any]:
        return self.collections.setdefault(name, [])

    # -- node creation -------------------------------------------------------------
    def definition_for(self, op_type: str) -> OpDefinition | None:
        """The OpDefinition of ``op_type``: from the plugin registry, else a library function."""
        found = catalog.current().op_definition(op_type)
        if found is None and (self._library is not None or len(self._template.library.function)):
            found = self.library.definition(op_type)
        return found

    def create_op(self, op_type: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None,
                  name: str | None = None, control_inputs: Sequence[Operation] = (),
                  output_dtypes: Sequence[DType] | None = None, unique: bool = True,
                  validate: bool = True) -> Operation:
        """Add a node. ``attrs`` maps names to Python values or AttrValue protos, encoded by the op
        definition's attr kinds. Prefer the builders (gradreg.raw_ops / gradreg.<api>), which infer
        attrs; create_op is the low level both use. (This is the hot path of graph and gradient
        construction: keep it lean.)"""
        definition = self.definition_for(op_type)
        if definition is None and output_dtypes is None:
            raise UnknownOpError(f"op type '{op_type}' has no definition: install the plugin that provides "
                                 f"it, or pass output_dtypes to create_op")
        if not all(t.graph is self for t in inputs):
            inputs = [t if t.graph is self else self._capture_outer(t, name or op_type) for t in inputs]
        node_name = self._node_name(name, op_type, unique)
        context = self._control_flow_context
        if context is not None:
            # TensorFlow's: a value entering a branch or a loop gets its Switch or Enter node in the
            # scope of the op that uses it ("cond/mul/Switch", "while/mul/Enter").
            with _NameScope(self, node_name):
                inputs = [context.capture(t) for t in inputs]
        controls = list(control_inputs)
        if self._control_dependencies:
            controls += [c for c in self._current_control_inputs(inputs) if c not in control_inputs]
        if context is not None and not inputs and not controls and context.pivot is not None:
            controls.append(context.pivot)   # an input-less op (Const) joins the branch or loop frame
        lazy: dict[str, tuple[Any, str | None]] = {}   # attr -> (value, kind): the NodeDef is written later
        known: dict[str, Any] = {}                      # attr values in the Python form get_attr returns
        if attrs:
            _split_attrs(definition, attrs, lazy, known)
        if self._gradient_override_map or self._attr_scope:
            lazy.update(self._scoped_attrs(op_type))
        op = self._add_node(node_name, op_type, definition, lazy_attrs=lazy)
        op._attr_cache = known
        op._context = context
        op.inputs = tuple(inputs)
        for t in inputs:
            t._consumers.append(op)
        op._control_inputs = controls
        for c in controls:
            c._add_control_output(op)
        self._init_outputs(op, output_dtypes)
        if validate:   # builders validate while inferring attrs and pass validate=False
            self._check_input_types(op)
        infer_shapes(op)
        return op

    def _node_name(self, name: str | None, op_type: str, unique: bool) -> str:
        if name and name[-1] == "/":
            node_name = name[:-1]        # TensorFlow's convention: a scope name names the op exactly
        else:
            node_name = self.unique_name(name or op_type) if unique or not name else name
        if node_name in self._ops_by_name:
            raise GraphError(f"duplicate node name '{node_name}'")
        return node_name

    def _capture_outer(self, t: Tensor, node: str) -> Tensor:
        """A tensor of another graph used by a new op: only a function being traced may capture
        tensors of the graphs it is traced in."""
        if self.encloses(t.graph):
            return self.capture(t)
        raise GraphError(f"input {t.name} of new node '{node}' belongs to another graph")

    def _add_node(self, name: str, op_type: str, definition: Any, node_def: node_def_pb2.NodeDef | None = None,
                  lazy_attrs: dict[str, tuple[Any, str | None]] | None = None) -> Operation:
        self._last_id += 1
        op = Operation(self, name, op_type, self._last_id, definition, node_def, lazy_attrs)
        self._ops.append(op)
        self._ops_by_name[name] = op
        key = name.lower()
        if key not in self._names_in_use:
            self._names_in_use[key] = 1
        return op

    def _init_outputs(self, op: Operation, output_dtypes: Sequence[DType] | None = None) -> None:
        definition = op.definition
        if output_dtypes is None:
            try:
                output_dtypes = definition.output_dtypes(op.get_attr)
            except GraphError:
                raise
            except Exception as exc:
                raise GraphError(f"{describe_node(op.name, op.type)}: cannot determine output types: {exc}") from None
        op.outputs = [Tensor(op, i, dt) for i, dt in enumerate(output_dtypes)]

    def _check_input_types(self, op: Operation) -> None:
        if op.definition is not None:
            _check_input_dtypes(op, _expected_input_types(op))
            _check_constrained_attrs(op)

    def _claim_imported_names(self) -> None:
        """Mark the names of imported nodes as used (deferred from the import to the first new name:
        a graph only read and run never needs them)."""
        self._names_pending = False
        names = self._names_in_use
        for op in self._ops:
            names.setdefault(op.name.lower(), 1)

    # -- import / export ---------------------------------------------------------
    def as_graph_def(self, add_shapes: bool = False) -> graph_pb2.GraphDef:
        """A GraphDef of the whole graph (nodes in creation order, library, versions)."""
        out = graph_pb2.GraphDef()
        out.CopyFrom(self._template)
        nodes = out.node
        for op in self._ops:
            node_def = op._node_def
            if isinstance(node_def, bytes):      # read from a file and never asked for: parsed here only
                nodes.add().MergeFromString(node_def)
            else:
                nodes.append(op.node_def)
        if add_shapes:
            for node, op in zip(out.node, self._ops):
                if op.outputs:
                    attr_util.set_entry(node.attr, "_output_shapes", attr_util.to_attr_value(
                        [t.shape for t in op.outputs], "list(shape)"))
        return out

    def __repr__(self) -> str:
        return f"<gradreg.Graph with {len(self._ops)} operations>"

def _expected_input_types(op: Operation) -> list[DType]:
    """The dtype each data input of ``op`` (which has a definition) must have, by its attrs."""
    try:
        expected: list[DType] = op.definition.input_dtypes(op.get_attr)
        return expected
    except GraphError:
        raise
    except Exception as exc:
        raise GraphError(f"{describe_node(op.name, op.type)}: cannot determine input types: {exc}") from None


def _check_input_dtypes(op: Operation, expected: Sequence[DType | None]) -> None:
    """``op``'s data inputs against the dtypes its definition expects of them."""
    inputs = op.inputs
    if len(expected) != len(inputs):
        raise GraphError(f"{describe_node(op.name, op.type)} expects {len(expected)} data inputs, "
                         f"found {len(inputs)}")
    for i, (want, t) in enumerate(zip(expected, inputs)):
        have = t.dtype
        if have is None or want is None or want is have:
            continue
        if want.base_dtype is not have.base_dtype:
            raise TypeMismatchError(
                f"{describe_node(op.name, op.type)}: input {i} ({t.name}) is {have.name}, "
                f"expected {want.name}")
        if want.is_ref and not have.is_ref:
            # A reference input (a TF1 variable's) must come from a reference output, as
            # TensorFlow requires: a plain value there has no variable behind it to read.
            raise TypeMismatchError(
                f"{describe_node(op.name, op.type)}: input {i} ({t.name}) is {have.name}, "
                f"expected {want.name} (a reference to a variable)")


def _as_expected(inputs: Sequence[Tensor], expected: Sequence[DType | None]) -> bool:
    """Whether each input has exactly the dtype expected of it (the common case, tested fast)."""
    if len(inputs) != len(expected):
        return False
    for want, t in zip(expected, inputs):  # noqa: SIM110  (a loop: all() of a generator costs twice as much here)
        if t.dtype is not want:
            return False
    return True


def _check_constrained_attrs(op: Operation) -> None:
    """``op``'s attrs against their definitions' constraints (allowed types and values, minimums)."""
    for spec in op.definition.attr_specs.values():
        if not spec.constrained:
            continue
        try:
            value = op.get_attr(spec.name)
        except GraphError:
            raise GraphError(f"{describe_node(op.name, op.type)} is missing required attr '{spec.name}'") from None
        spec.check(value, describe_node(op.name, op.type))


def _split_attrs(definition: OpDefinition | None, attrs: dict[str, Any], lazy: dict[str, tuple[Any, str | None]],
                 known: dict[str, Any]) -> None:
    """A new op's attrs as (value, kind) pairs into ``lazy``, for the NodeDef written later, and
    those already in the Python form get_attr returns into ``known``."""
    specs = definition.attr_specs if definition is not None else _NO_SPECS
    for key, value in attrs.items():
        spec = specs.get(key)
        kind = spec.kind if spec is not None else None
        lazy[key] = (value, kind)
        if kind in _CACHEABLE_KINDS or (kind == "tensor" and type(value) is np.ndarray):
            known[key] = value


def _gradient_override_attrs(gradient_name: str) -> dict[str, tuple[Any, str | None]]:
    """TensorFlow's ``_gradient_op_type`` attr, and which plugin provides that gradient
    (``_gradient_op_plugin``) so a process lacking it can say what to install."""
    out: dict[str, tuple[Any, str | None]] = {"_gradient_op_type": (gradient_name.encode(), "string")}
    plugin = catalog.current().gradient_plugin(gradient_name)
    if plugin is not None:
        out["_gradient_op_plugin"] = (plugin.encode(), "string")
    return out

def import_graph_def(graph_def: graph_pb2.GraphDef, source: str = "GraphDef",
                     library: FunctionLibrary | None = None, graph: Graph | None = None, *,
                     node_bytes: Sequence[bytes] | None = None) -> Graph:
    """Build a Graph from a GraphDef, keeping every NodeDef as written.

    Checks: duplicate names, inputs naming missing nodes or outputs, input dtypes and
    attrs against the op definitions, cycles outside loop frames (a data cycle is allowed
    only through NextIteration). ``source`` (usually the file path) prefixes messages.
    ``library`` shares another graph's function library (for function bodies); ``graph``
    is an empty Graph (or subclass) to fill instead of a new one. ``node_bytes``: the nodes'
    bytes, when the caller has them (gradreg.model.node_bytes.split_graph_def of a file's
    bytes), ``graph_def`` holding the rest of it (no nodes). The current deadline
    (gradreg.deadline) is checked every few thousand nodes.
    """
    g = Graph() if graph is None else graph
    if len(g):
        raise GraphError("import_graph_def needs an empty graph to fill")
    n = len(graph_def.node) if node_bytes is None else len(node_bytes)
    if n > config.max_nodes:
        raise GraphError(f"{source}: {n:,} nodes, more than the limit of {config.max_nodes:,} "
                         f"({config.how_to_raise('max_nodes')})")
    if node_bytes is None:
        graph_def, node_bytes = split_graph_def(graph_def.SerializeToString())
    g._template.CopyFrom(graph_def)
    if library is not None:
        g._library = library
    # Function bodies and small graphs import in no time: only a big graph reports its progress.
    progress = task(_log, f"importing {source} ({n} nodes)", n, "nodes") \
        if n >= _REPORTED_IMPORT else contextlib.nullcontext(_NO_PROGRESS)
    with progress as steps, _collector_paused():
        importer = _Importer(g, source, n, steps)
        order = importer.run(node_bytes)
        steps.advance(n - importer.reported)
        refine_loop_shapes(order)   # static shapes of v1 loop variables, which one pass cannot see
    return g


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a graph is built, as it was before afterwards: the
    objects of a large graph, made by the million, would set it off again and again over all
    of them (a third of the time of a 10**6-node import); a graph holds no garbage cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Importer:
    """import_graph_def's work, node by node: an Operation for each (its attrs checked and decoded,
    its outputs made: once for all nodes with the same attrs), its inputs resolved, its input
    dtypes checked and its shapes inferred. A file lists nodes after their inputs as TensorFlow
    and gradreg write them, and then one pass does it all; from the first node whose input comes
    later (a loop's back edge, a hand-made file), the rest is linked once every node is read,
    sorted (which finds a cycle, if there is one) and checked in that order."""

    def __init__(self, graph: Graph, source: str, n: int, steps: Any = None):
        self.graph = graph
        self.source = source
        self.n = n
        self.steps = steps          # the progress of a big graph's import (advanced while reading)
        self.reported = 0           # the nodes read that steps counts
        self.shared: dict[tuple[str, bytes], _SharedAttrs] = {}
        self.definitions: dict[str, Any] = {}

    def in_time(self, i: int, what: str) -> None:
        """Check the current deadline (the callers do, every 4,096 nodes)."""
        deadline.check(self.source, f"while loading ({what} node {i + 1:,} of {self.n:,})")
        if what == "reading" and self.steps is not None:
            self.steps.advance(i - self.reported)
            self.reported = i

    def run(self, node_bytes: Sequence[bytes]) -> list[Operation]:
        """Import every node; returns them in a topological order."""
        g = self.graph
        by_name, first = g._ops_by_name, len(g._ops)
        deferred: list[tuple[Operation, list[str]]] = []    # nodes to link once all are read
        for i, raw in enumerate(node_bytes):
            if not i & 4095:
                self.in_time(i, "reading")
            op, texts = self.add(raw)
            if by_name.setdefault(op.name, op) is not op:
                raise GraphError(f"{self.source}: duplicate node name '{op.name}'")
            g._ops.append(op)
            if deferred or not self.link(op, texts, by_name, tentative=True):
                deferred.append((op, texts))
                continue
            self.check(op)
        g._names_pending = True
        ops = g._ops[first:]
        if not deferred:
            return ops
        for i, (op, texts) in enumerate(deferred):
            if not i & 4095:
                self.in_time(i, "linking")
            self.link(op, texts, by_name, tentative=False)
        order = topological_order(ops, self.source)
        waiting = {op for op, _ in deferred}
        for i, op in enumerate(order):
            if not i & 4095:
                self.in_time(i, "checking")
            if op in waiting:
                self.check(op)
        return order

    def add(self, raw: bytes) -> tuple[Operation, list[str]]:
        """The Operation of a node's bytes (not yet in the graph), with its outputs, and its inputs'
        texts."""
        g, source = self.graph, self.source
        head = read_head(raw)
        name, op_type, texts, _, attrs = head if head is not None else read_parsed(
            node_def_pb2.NodeDef.FromString(raw))
        if not name or not name.isprintable():
            _check_node_name(name, op_type, source)
        definition = self.definitions.get(op_type, _MISSING)
        if definition is _MISSING:
            _check_node_name(name, op_type, source)
            definition = self.definitions[op_type] = g.definition_for(op_type)
        g._last_id += 1
        op = Operation(g, name, op_type, g._last_id, definition, raw)
        if definition is not None:
            attr_values = self.shared.get((op_type, attrs))
            if attr_values is None:
                attr_values = self.shared[(op_type, attrs)] = self.first_of_its_kind(op, attrs)
            op._attr_cache = attr_values
            dtypes = attr_values.output_dtypes
            op.outputs = [Tensor(op, 0, dtypes[0])] if len(dtypes) == 1 else [
                Tensor(op, k, dt) for k, dt in enumerate(dtypes)]
        return op, texts

    def first_of_its_kind(self, op: Operation, attrs: bytes) -> _SharedAttrs:
        """The first node with these attrs (and op type): they are checked (kinds, counts) and
        decoded into the dict every such node shares, with their output dtypes."""
        attr_values = _SharedAttrs(node_def_pb2.NodeDef.FromString(attrs))
        op._attr_cache = attr_values
        _check_attr_kinds(op, self.source)
        try:
            attr_values.output_dtypes = op.definition.output_dtypes(op.get_attr)
        except GraphError as exc:
            raise GraphError(f"{self.source}: {exc}") from None
        except Exception as exc:
            raise GraphError(f"{self.source}: {describe_node(op.name, op.type)}: cannot determine output types: "
                             f"{exc}") from None
        return attr_values

    def link(self, op: Operation, texts: list[str], by_name: dict[str, Operation], tentative: bool) -> bool:
        """Resolve ``op``'s inputs to tensors and control inputs. ``tentative``: if one names a
        node not read yet (or ``op`` itself), change nothing and return False."""
        source = self.source
        data: list[Tensor] = []
        controls: list[Operation] = []
        for text in texts:
            producer = by_name.get(text) if ":" not in text and text[:1] != "^" else None
            if producer is not None and producer is not op and producer.outputs and not controls:
                data.append(producer.outputs[0])       # the commonest input: output 0 of a node before
                continue
            name, port, is_control = parse_input_name(text)
            producer = by_name.get(name)
            if tentative and (producer is None or producer is op):
                return False
            if producer is None:
                raise GraphError(f"{source}: {describe_node(op.name, op.type)} has input '{shown(text)}' "
                                 f"naming missing node '{shown(name)}'")
            if is_control:
                controls.append(producer)
            elif controls:
                raise GraphError(f"{source}: {describe_node(op.name, op.type)} lists data input '{text}' "
                                 f"after a control input")
            else:
                data.append(_resolve_output(producer, port, op, text, source))
        if data:
            op.inputs = tuple(data)
            for t in data:
                t._consumers.append(op)
        if controls:
            op._control_inputs = controls
            for c in controls:
                c._add_control_output(op)
        return True

    def check(self, op: Operation) -> None:
        """``op``'s input dtypes and attr constraints (once for the nodes sharing its attrs), and
        its output shapes."""
        try:
            attr_values = op._attr_cache
            if type(attr_values) is _SharedAttrs:
                expected = attr_values.input_dtypes
                if expected is None:
                    expected = _expected_input_types(op)
                    _check_input_dtypes(op, expected)
                    _check_constrained_attrs(op)
                    attr_values.input_dtypes = expected
                elif not _as_expected(op.inputs, expected):
                    _check_input_dtypes(op, expected)        # says what is wrong, if anything is
            elif op.definition is not None:
                self.graph._check_input_types(op)
            infer_shapes(op)
        except GraphError as exc:
            raise type(exc)(f"{self.source}: {exc}") from None


class NodeReader:
    """Operations of single serialized NodeDefs, checked as import_graph_def checks them (name,
    attr kinds and counts) and with their outputs typed, but with no inputs, not in ``graph``
    (whose op definitions and library they use) and without shapes: for a look at a few nodes
    of a graph too big to build (gradreg.cli_inspect). Nodes with the same attrs share one
    decoding of them, as in an import."""

    def __init__(self, graph: Graph, source: str):
        self._importer = _Importer(graph, source, 1)
        self._source = source

    def operation(self, raw: bytes) -> Operation:
        try:
            op, _ = self._importer.add(raw)
        except (protobuf_message.DecodeError, ValueError, RuntimeError) as exc:
            raise GraphFileError(f"{self._source}: not a binary GraphDef (truncated or corrupt: {exc})") from None
        return op


def _check_node_name(name: str, op_type: str, source: str) -> None:
    if not name:
        raise GraphError(f"{source}: a node with op '{op_type}' has no name")
    if _CONTROL_CHARACTERS.search(name) or _CONTROL_CHARACTERS.search(op_type):
        # TensorFlow allows none (names are [A-Za-z0-9.][A-Za-z0-9_./>-]*); a newline would also
        # split every message naming the node.
        raise GraphError(f"{source}: node {name!r} (op {op_type!r}): control characters in its name or op type")
    if not op_type:
        raise GraphError(f"{source}: node '{name}' has no op type")


_log = "model"   # the logger gradreg.model (gradreg.progress)
_REPORTED_IMPORT = 500   # nodes: a graph this big reports the progress of its import


class _NoProgress:
    """Task.advance for imports too small to report."""

    @staticmethod
    def advance(count: int = 1) -> None:
        pass


_NO_PROGRESS = _NoProgress()


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")

# String attrs that are names or text (frame, stack and resource names, equations, modes): refused
# on load when they are not UTF-8, which is how they are read.
TEXT_ATTRS = frozenset({
    "frame_name", "stack_name", "shared_name", "container", "equation", "mode", "bad_indices_policy",
    "data_format", "padding", "tensor_array_name", "_gradient_op_type", "_gradient_op_plugin", "_gradreg_rule",
})


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _check_attr_kinds(op: Operation, source: str) -> None:
    """An imported node's attrs against its op definition, as TensorFlow checks them: each of the
    kind declared, and list lengths and counts (``N``, ``num_split``) within the arity limit."""
    specs = op.definition.attr_specs
    for entry in op._attr_entries():
        if entry.key in TEXT_ATTRS and not _is_utf8(entry.value.s):
            raise GraphError(f"{source}: {describe_node(op.name, op.type)}: attr '{entry.key}' is not UTF-8 text "
                             f"({entry.value.s[:40]!r})")
        spec = specs.get(entry.key)
        if spec is None:
            continue
        problem = attr_util.kind_problem(entry.value, spec.kind)
        if problem is None and spec.kind in ("int", "list(type)"):
            problem = _arity_problem(op, spec.name, entry.value)
        if problem is not None:
            raise GraphError(f"{source}: {describe_node(op.name, op.type)}: attr '{entry.key}' {problem}")


def _arity_problem(op: Operation, name: str, value: Any) -> str | None:
    """A count attr (an argument's number_attr) or a type list over the arity limit."""
    limit = config.max_op_arity
    if value.WhichOneof("value") == "list":
        n = len(value.list.type)
    elif any(a.number_attr == name for a in (*op.definition.input_args, *op.definition.output_args)):
        n = value.i
        if n < 0:
            return f"is {n}: a count must not be negative"
    else:
        return None
    if n > limit:
        return f"is {n:,}: more than {limit:,} inputs or outputs ({config.how_to_raise('max_op_arity')})"
    return None


def _resolve_output(producer: Operation, port: int, consumer: Operation, text: str, source: str) -> Tensor:
    if producer.definition is None:
        if port > config.max_op_arity:   # an unknown op's outputs are made as referenced: bound them
            raise GraphError(f"{source}: {describe_node(consumer.name, consumer.type)} has input '{text}': "
                             f"output {port:,} is past the arity limit {config.max_op_arity:,} "
                             f"({config.how_to_raise('max_op_arity')})")
        return producer.output(port)
    if port >= len(producer.outputs) or port < 0:
        raise GraphError(f"{source}: {describe_node(consumer.name, consumer.type)} has input '{text}', "
                         f"but '{producer.name}' ({producer.type}) has {len(producer.outputs)} outputs")
    return producer.outputs[port]
