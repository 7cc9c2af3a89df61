"""Node builders driven by the op table.

:func:`apply_op` builds a node of any defined op type from Python values: it binds
inputs to the definition's input arguments, infers type attrs (``T``) and list lengths
(``N``) from the inputs, converts Python values and arrays to Const nodes of the right
dtype, fills attr defaults, checks type constraints, and returns the outputs.

    >>> x = gradreg.placeholder(gradreg.float32, [2], name="x")
    >>> y = apply_op("AddV2", x, 1.0)          # 1.0 becomes a float32 Const
    >>> y.op.get_attr("T")
    gradreg.float32

``gradreg.raw_ops.<OpType>`` is apply_op bound to one op type; op table entries with
``api=`` also appear as ``gradreg.<api>``.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from gradreg.build.signatures import builder_doc, builder_signature
from gradreg.errors import GradregError, GraphError, OpArgumentError, TypeMismatchError, UnknownOpError
from gradreg.model import dtypes, tensor_util
from gradreg.model.dtypes import DType
from gradreg.model.graph import Graph, Operation, Tensor, get_default_graph
from gradreg.model.indexed_slices import LARGE_SPARSE_NUM_ELEMENTS, IndexedSlices, SparseDensifyWarning
from gradreg.model.opdefs import ArgSpec, OpDefinition
from gradreg.model.shape_inference import constant_value
from gradreg.model.shapes import TensorShape
from gradreg.registry import get_registry


def _is_tensor_like(value: Any) -> bool:
    return isinstance(value, (Tensor, IndexedSlices)) or hasattr(value, "_gradreg_tensor_")


def graph_of(values: Any) -> Graph:
    """The graph the given tensors live in (the default graph if none is a Tensor). While a
    function is traced, tensors of the graphs it is traced in may mix with its own."""
    graphs: list[Graph] = []
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
            continue
        g = v.graph if isinstance(v, (Tensor, Operation)) else getattr(v, "graph", None) if _is_tensor_like(v) else None
        if g is not None and g not in graphs:
            graphs.append(g)
    if not graphs:
        return get_default_graph()
    if len(graphs) == 1:
        return graphs[0]
    default = get_default_graph()
    if default in graphs and all(g is default or default.encloses(g) for g in graphs):
        return default
    raise GradregError(f"inputs come from {len(graphs)} different graphs")


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str = "Const",
             graph: Graph | None = None) -> Tensor:
    """A Const node holding ``value`` (converted to ``dtype``; with ``shape``, a single value
    fills the shape, as in TensorFlow).

    >>> gradreg.constant([1, 2, 3], gradreg.float32).shape
    TensorShape([3])
    """
    graph = graph or get_default_graph()
    dt = None if dtype is None else dtypes.as_dtype(dtype)
    value_attr: Any
    array: np.ndarray[Any, Any] | None
    if shape is not None or (dt is not None and (dt.np is None or dt.kind not in "fciub")):
        # The short form ("one value fills the shape") and types NumPy cannot hold natively
        # (bfloat16, strings, ...) are written to a TensorProto now.
        array, value_attr = tensor_util.array_and_proto(value, dt, shape)
    else:
        value_attr = array = tensor_util.as_array(value, None if dt is None else dt.base_dtype)
    dt = dt.base_dtype if dt is not None else dtypes.as_dtype(value_attr.dtype)
    op = graph.create_op("Const", [], {"value": value_attr, "dtype": dt}, name=name, validate=False)
    out = op.outputs[0]
    if array is not None and dt.kind in "fciub":
        # The value is known now: get_attr and shape inference need not decode a proto (which is
        # only written, from the array, if the graph is saved).
        array.setflags(write=False)
        op.cache_attr("value", array)
        if array.size <= _KNOWN_CONSTANT_SIZE:
            out.memoize_value(array)
    return out


_KNOWN_CONSTANT_SIZE = 1024


def convert_to_tensor(value: Any, dtype: Any = None, name: str | None = None, graph: Graph | None = None,
                      preferred_dtype: Any = None) -> Tensor:
    """``value`` as a Tensor: Tensors pass through (checked against ``dtype``), objects with
    ``_gradreg_tensor_`` convert themselves, anything else becomes a Const node."""
    dt = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(value, Tensor):
        if dt is not None and value.dtype is not None and value.dtype.base_dtype is not dt.base_dtype:
            raise TypeMismatchError(f"tensor {value.name} is {value.dtype.name}, expected {dt.name}")
        return value
    if isinstance(value, IndexedSlices):
        dense: Tensor = densify(value, dt)
        return dense
    convert = getattr(value, "_gradreg_tensor_", None)
    if convert is not None:
        return convert_to_tensor(convert(dt), dt, name, graph)
    if isinstance(value, (list, tuple)) and _contains_tensor(value):
        if dt is None:
            dt = next(t.dtype.base_dtype for t in _leaves(value) if _is_tensor_like(t) and
                      getattr(t, "dtype", None) is not None)
        packed: Tensor = _autopack(value, dt, graph or graph_of(value), name or "packed")
        return packed
    # ``preferred_dtype`` is for values without a dtype of their own (Python scalars and lists);
    # a NumPy array or scalar keeps its dtype.
    if dt is None and preferred_dtype is not None and not isinstance(value, (np.ndarray, np.generic)):
        try:
            return constant(value, preferred_dtype, name=name or "Const", graph=graph)
        except GradregError:
            pass
    return constant(value, dt, name=name or "Const", graph=graph)


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_contains_tensor(v) for v in value)
    return _is_tensor_like(value)


def _autopack(value: Any, dtype: DType, graph: Graph, name: str) -> Any:
    """A list mixing Tensors and Python values becomes a Pack of them, as in TensorFlow
    (``reshape(x, [n, -1])`` with ``n`` a Tensor): in the scope ``name``, its Python items are
    Consts named by their position and the Pack takes the scope's name (``Reshape/shape/1``,
    ``Reshape/shape``). A nested list without Tensors stays a list (its parent packs it)."""
    with graph.name_scope(name) as scope:
        items = [_autopack(v, dtype, graph, str(i)) if isinstance(v, (list, tuple)) else v
                 for i, v in enumerate(value)]
        if not any(_is_tensor_like(v) for v in items):
            return items
        tensors = [convert_to_tensor(v, dtype, name=str(i), graph=graph) for i, v in enumerate(items)]
        return apply_op("Pack", tensors, axis=0, name=scope)


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _normalize_attr(spec: Any, value: Any) -> Any:
    kind = spec.kind
    if kind == "type":
        return dtypes.as_dtype(value)
    if kind == "list(type)":
        return [dtypes.as_dtype(v) for v in value]
    if kind == "string" and isinstance(value, str):
        return value.encode()
    if kind == "list(string)":
        return [v.encode() if isinstance(v, str) else v for v in value]
    if kind == "shape":
        return TensorShape(value)
    return value


def _graph_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Graph:
    """graph_of(args, kwargs), fast for the common case: Tensor arguments of one graph."""
    found = None
    for a in args:
        if type(a) is Tensor:
            if found is None:
                found = a.graph
            elif a.graph is not found:
                return graph_of((args, list(kwargs.values())))
        elif not isinstance(a, (int, float, bool)):
            return graph_of((args, list(kwargs.values())))
    if kwargs:
        found = _graph_of_keywords(kwargs, found)
        if found is _MIXED:
            return graph_of((args, list(kwargs.values())))
    default = get_default_graph()
    if found is None:
        return default
    if default is not found and default.encloses(found):
        return default   # a function being traced captures the outer graph's tensors
    return found


_MIXED: Any = object()   # _graph_of_keywords: not a simple case, ask graph_of


def _graph_of_keywords(kwargs: dict[str, Any], found: Graph | None) -> Any:
    for v in kwargs.values():
        if type(v) is Tensor:
            if found is None:
                found = v.graph
            elif v.graph is not found:
                return _MIXED
        elif isinstance(v, (list, tuple, IndexedSlices)) or hasattr(v, "_gradreg_tensor_"):
            return _MIXED
    return found


class _Binding:
    """How apply_op binds arguments for one op definition (computed once per definition)."""

    __slots__ = ("inputs", "attrs", "outputs_kind")

    def __init__(self, definition: Any):
        specs = definition.attr_specs
        self.inputs = []
        for arg in definition.input_args:
            preferred = None
            if arg.type_attr:
                default = specs[arg.type_attr].default
                preferred = default if isinstance(default, DType) else None
            self.inputs.append((arg, preferred))
        self.attrs = []
        for key, spec in specs.items():
            allowed = None if spec.allowed_types is None else frozenset(t.enum for t in spec.allowed_types)
            self.attrs.append((key, spec, allowed, spec.constrained))
        out_args = definition.output_args
        if not out_args:
            self.outputs_kind = "op"
        elif len(out_args) == 1:
            self.outputs_kind = "list" if out_args[0].is_list else "single"
        else:
            self.outputs_kind = "grouped" if any(a.is_list for a in out_args) else "tuple"


# One binding per op definition (definitions hash by identity), made on first use.
_bindings: dict[OpDefinition, _Binding] = {}


def _binding(definition: OpDefinition) -> _Binding:
    found = _bindings.get(definition)
    if found is None:
        found = _bindings[definition] = _Binding(definition)
    return found


def apply_op(op_type: str, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Build a node of ``op_type``; positional args bind to the input arguments in order,
    keyword args to inputs by name or to attrs. Returns a Tensor (one output), a tuple or
    list of Tensors (several outputs or a list output), or the Operation (no outputs).

    Bad arguments raise OpArgumentError (also a TypeError), types that do not fit
    TypeMismatchError, an unknown op type UnknownOpError.
    """
    graph = _graph_for(args, kwargs)
    definition = graph.definition_for(op_type)
    if definition is None:
        raise UnknownOpError(f"op type '{op_type}' has no definition (no installed plugin provides it)")
    binding = _binding(definition)
    attrs: dict[str, Any] = {}
    values = _bind_arguments(op_type, definition, binding, args, kwargs, attrs)
    _infer_type_attrs(binding, values, attrs)
    flat: list[Tensor] = []
    if _all_tensors(values):
        for (arg, preferred), value in zip(binding.inputs, values):
            flat.extend(_convert_input(op_type, graph, arg, preferred, value, attrs))
    else:
        # As TensorFlow's op_def_library: the op's name becomes a scope, its Python inputs are
        # Consts inside it ("Sub/y"), and the op takes the scope's name exactly. Never the
        # argument's bare name, which a user may give a tensor of their own later.
        with _scope_or_top(graph, name or op_type) as scope:
            for (arg, preferred), value in zip(binding.inputs, values):
                flat.extend(_convert_input(op_type, graph, arg, preferred, value, attrs))
        name = scope or name
    op = graph.create_op(op_type, flat, _complete_attrs(op_type, binding, attrs), name=name or op_type,
                         validate=False)
    if binding.outputs_kind == "single":
        return op.outputs[0]
    return _outputs(op, definition)


def _all_tensors(values: list[Any]) -> bool:
    """Whether every input value is a Tensor already (nothing to convert: no scope needed)."""
    for value in values:
        if type(value) is not Tensor and (not isinstance(value, (list, tuple))
                                          or any(type(v) is not Tensor for v in value)):
            return False
    return True


def _scope_or_top(graph: Graph, name: str) -> Any:
    """graph.name_scope(name); for a name that cannot be a scope (an imported node's name with
    characters TensorFlow allows in no scope), no scope: the Consts are named "Const"."""
    try:
        return graph.name_scope(name)
    except GraphError:
        return contextlib.nullcontext("")


def op_scope(name: str | None, default: str, values: Any = ()) -> Any:
    """TensorFlow's ``with name_scope(name, default, values) as scope`` for builders that make
    helper nodes: a context manager over the values' graph yielding ``"<scope>/"``; the helper
    nodes go inside and the result, built with ``name=scope``, takes the scope's own name.
    ``name`` (the user's) wins over ``default``; a name ending in "/" re-enters that scope.

    >>> with op_scope(None, "clip_by_value", [t]) as scope:
    ...     low = apply_op("Minimum", t, 1.0)                  # clip_by_value/Minimum
    ...     out = apply_op("Maximum", low, 0.0, name=scope)    # clip_by_value
    """
    return graph_of(values).name_scope(name or default)


def conversion_scope(name: str | None, default: str, values: Any) -> Any:
    """op_scope, but only when one of ``values`` is not a Tensor yet (its Const then goes inside):
    for builders TensorFlow gives no scope of their own, whose Tensor inputs make no helper nodes.
    Yields ``name`` unchanged when every value is a Tensor."""
    if all(isinstance(v, Tensor) for v in values):
        return contextlib.nullcontext(name)
    return op_scope(name, default, values)


def _bind_arguments(op_type: str, definition: OpDefinition, binding: _Binding, args: tuple[Any, ...],
                    kwargs: dict[str, Any], attrs: dict[str, Any]) -> list[Any]:
    """The value of each input argument (positional, then by keyword); the attrs given go into
    ``attrs``."""
    inputs = binding.inputs
    if len(args) > len(inputs):
        raise OpArgumentError(f"{op_type} takes {len(inputs)} inputs, got {len(args)} positional arguments")
    values = list(args)
    for arg, _ in inputs[len(args):]:
        if arg.name not in kwargs:
            raise OpArgumentError(f"{op_type}: missing input '{arg.name}'")
        values.append(kwargs.pop(arg.name))
    specs = definition.attr_specs
    for key, value in kwargs.items():
        spec = specs.get(key)
        if spec is None:
            raise OpArgumentError(f"{op_type} has no input or attr named '{key}'")
        if value is not None:
            attrs[key] = _normalize_attr(spec, value)
    return values


def _infer_type_attrs(binding: _Binding, values: list[Any], attrs: dict[str, Any]) -> None:
    """Type attrs not given explicitly, from the first Tensor of an input that has them."""
    for (arg, _), value in zip(binding.inputs, values):
        ta = arg.type_attr
        if ta and ta not in attrs:
            items = value if arg.number_attr and isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, Tensor) and item.dtype is not None:
                    attrs[ta] = item.dtype.base_dtype
                    break


def _convert_input(op_type: str, graph: Graph, arg: ArgSpec, preferred: DType | None, value: Any,
                   attrs: dict[str, Any]) -> list[Tensor]:
    """The Tensors of one input argument (a list argument gives several), converted to the
    argument's type; fills its type and length attrs when they are still unknown."""
    is_list = bool(arg.number_attr or arg.type_list_attr)
    items = _list_items(op_type, arg, value, attrs) if is_list else (value,)
    want = arg.fixed_type if arg.fixed_type is not None else attrs.get(arg.type_attr) if arg.type_attr else None
    converted = []
    for i, item in enumerate(items):
        if type(item) is Tensor and want is not None and item.dtype is not None:
            if item.dtype.enum != want.enum and item.dtype.base_dtype is not want.base_dtype:
                raise TypeMismatchError(f"{op_type} input '{arg.name}': tensor {item.name} is "
                                        f"{item.dtype.name}, expected {want.name}")
            converted.append(item)
            continue
        try:
            # With no Tensor to take the type from, a Python value prefers the attr's default
            # type (Tidx = int32), else the usual inference (float -> float32, int -> int32);
            # a NumPy array keeps its own dtype.
            t = convert_to_tensor(item, want, graph=graph, preferred_dtype=preferred if want is None else None,
                                  name=None if isinstance(item, Tensor) else f"{arg.name}_{i}" if is_list else arg.name)
        except GradregError as exc:
            raise TypeMismatchError(f"{op_type} input '{arg.name}': {exc}") from None
        if want is None and arg.type_attr:
            want = attrs[arg.type_attr] = t.known_dtype.base_dtype
        converted.append(t)
    if arg.type_list_attr:
        types = [t.known_dtype.base_dtype for t in converted]
        given = attrs.setdefault(arg.type_list_attr, types)
        if list(given) != types:
            raise TypeMismatchError(f"{op_type}: attr {arg.type_list_attr} does not match input '{arg.name}'")
    return converted


def _list_items(op_type: str, arg: ArgSpec, value: Any, attrs: dict[str, Any]) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise OpArgumentError(f"{op_type}: input '{arg.name}' must be a list of tensors")
    items = list(value)
    if arg.number_attr:
        n = attrs.setdefault(arg.number_attr, len(items))
        if n != len(items):
            raise OpArgumentError(f"{op_type}: attr {arg.number_attr}={n} but input '{arg.name}' has "
                                  f"{len(items)} items")
    return items


def _complete_attrs(op_type: str, binding: _Binding, attrs: dict[str, Any]) -> dict[str, Any]:
    """Every attr of the definition, in its order: given or inferred, else the default;
    checked against its constraints."""
    ordered: dict[str, Any] = {}
    for key, spec, allowed, checked in binding.attrs:
        value = attrs.get(key, _UNSET)
        if value is _UNSET:
            if not spec.has_default:
                raise OpArgumentError(f"{op_type}: missing required attr '{key}'")
            value = spec.default
            if value is None:   # an optional attr without a default (ONNX's): absent from the node
                continue
        ordered[key] = value
        if checked:
            if allowed is not None and type(value) is DType:
                if value.base_dtype.enum not in allowed:
                    spec.check(value, op_type)   # raises, naming the allowed types
            else:
                spec.check(value, op_type)
    return ordered


_UNSET = object()


def _outputs(op: Operation, definition: OpDefinition) -> Any:
    outputs = op.outputs
    out_args = definition.output_args
    if not out_args:
        return op
    if len(out_args) == 1:
        return list(outputs) if out_args[0].is_list else outputs[0]
    if not any(a.is_list for a in out_args):
        return tuple(outputs)
    grouped = []
    for start, stop in definition.output_arg_ranges(op.get_attr).values():
        grouped.append(outputs[start:stop])
    return tuple(g if a.is_list else g[0] for g, a in zip(grouped, out_args))


def make_builder(definition: Any, api_name: str | None = None) -> Callable[..., Any]:
    """A Python builder for one op type (what gradreg.raw_ops.<OpType> and gradreg.<api> are),
    with the signature and docstring its op definition implies (gradreg.build.signatures)."""
    op_type = definition.name

    def builder(*args: Any, name: str | None = None, **kwargs: Any) -> Any:
        return apply_op(op_type, *args, name=name, **kwargs)

    # A namespaced api name ("nn.relu") is the function relu of the module gradreg.nn.
    namespace, _, short = (api_name or op_type).rpartition(".")
    builder.__name__ = builder.__qualname__ = short
    builder.__module__ = "gradreg.raw_ops" if api_name is None else ".".join(filter(None, ("gradreg", namespace)))
    builder.__doc__ = builder_doc(definition, api_name or op_type)
    signature = builder_signature(definition)
    if signature is not None:
        builder.__signature__ = signature  # type: ignore[attr-defined]
    return builder


# -- builders by name ---------------------------------------------------------------------------

_builders: dict[str, Callable[..., Any]] = {}
_builders_of: list[Any] = [None]   # the registry the cached builders came from


def api_function(name: str) -> Callable[..., Any]:
    """The Python builder called ``name`` (``gradreg.<name>``): a plugin's builder function, or
    the builder generated for the op definition that names it in ``api=``. AttributeError if no
    installed plugin provides it."""
    registry = get_registry()
    if _builders_of[0] is not registry:
        _builders.clear()
        _builders_of[0] = registry
    fn = _builders.get(name)
    if fn is None:
        found = registry.api.lookup(name)
        if found is None:
            raise AttributeError(f"gradreg has no builder '{name}' (no installed plugin provides it)")
        value = found.value
        fn = _builders[name] = make_builder(value, name) if isinstance(value, OpDefinition) else value
    return fn


# -- IndexedSlices --------------------------------------------------------------------------------

def densify(value: IndexedSlices, dtype: Any = None, name: str | None = None) -> Tensor:
    """The dense Tensor of an IndexedSlices (UnsortedSegmentSum of its rows)."""
    own = value.values.known_dtype
    if dtype is not None and not own.is_compatible_with(dtype):
        raise TypeMismatchError(f"cannot convert IndexedSlices of {own.name} to {dtype}")
    if value.dense_shape is None:
        raise TypeMismatchError(f"cannot densify {value!r}: it has no dense_shape")
    known = constant_value(value.dense_shape)
    if known is None:
        warnings.warn("Converting sparse IndexedSlices to a dense Tensor of unknown shape. "
                      "This may consume a large amount of memory.", SparseDensifyWarning, stacklevel=3)
    else:
        n = int(np.prod(known))
        if n >= LARGE_SPARSE_NUM_ELEMENTS:
            warnings.warn(f"Converting sparse IndexedSlices to a dense Tensor with {n} elements. "
                          f"This may consume a large amount of memory.", SparseDensifyWarning, stacklevel=3)
    first_dim = apply_op("StridedSlice", value.dense_shape, [0], [1], [1], shrink_axis_mask=1)
    dense: Tensor = apply_op("UnsortedSegmentSum", value.values, value.indices, first_dim,
                             name=name or "UnsortedSegmentSum")
    return dense


def as_dense(value: Any) -> Any:
    """Densify IndexedSlices; other values unchanged."""
    return densify(value) if isinstance(value, IndexedSlices) else value
