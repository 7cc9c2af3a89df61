"""Kernels of the control-flow family. Switch, Merge, Enter, Exit, NextIteration and
LoopCond have none: the plan compiler turns them into Python control flow."""
from __future__ import annotations

import numpy as np

from gradreg import config, deadline
from gradreg import kernel_support as ks
from gradreg.build.functions import call_attrs_of
from gradreg.errors import ExecutionError, IterationLimitError, describe_node
from gradreg.registry.kernels import IDENTITY, NOOP
from gradreg.runtime.functions import function_plan
from gradreg_plugins.control_flow import family

kernel = family.kernel

kernel("NoOp")(lambda op, ctx: NOOP)
kernel("RefIdentity")(lambda op, ctx: IDENTITY)
kernel("ControlTrigger")(lambda op, ctx: NOOP)


@kernel("Assert")
def _assert(op, ctx):
    summarize = op.get_attr("summarize")

    def check(condition, *data):
        if not bool(np.all(condition)):
            shown = "; ".join(np.array2string(np.asarray(d).reshape(-1)[:summarize], threshold=summarize)
                              for d in data)
            raise ExecutionError(f"{describe_node(op.name, op.type)}: assertion failed: [{shown}]",
                                 op.name, op.type)
    return check


class Stack:
    """A StackV2 resource: a list of values, pushed in a forward loop, popped in its gradient loop."""

    __slots__ = ("name", "max_size", "items")

    def __init__(self, name: str, max_size: int):
        self.name = name
        self.max_size = max_size
        self.items: list = []

    def __repr__(self) -> str:
        return f"<stack {self.name} ({len(self.items)} items)>"


@kernel("StackV2")
def _stack(op, ctx):
    name = op.get_attr("stack_name").decode() or op.name
    return lambda max_size: Stack(name, int(max_size))


@kernel("StackPushV2")
def _stack_push(op, ctx):
    def push(stack, elem):
        if 0 <= stack.max_size <= len(stack.items):
            raise ExecutionError(f"{describe_node(op.name, op.type)}: stack '{stack.name}' is full "
                                 f"({stack.max_size} items)", op.name, op.type)
        stack.items.append(elem)
        return elem
    return push


@kernel("StackPopV2")
def _stack_pop(op, ctx):
    def pop(stack):
        if not stack.items:
            raise ExecutionError(f"{describe_node(op.name, op.type)}: pop from empty stack '{stack.name}'",
                                 op.name, op.type)
        return stack.items.pop()
    return pop


@kernel("StackCloseV2")
def _stack_close(op, ctx):
    return lambda stack: stack.items.clear()


# -- functional control flow ---------------------------------------------------------------

def _truth(value) -> bool:
    """TensorFlow's If condition: a scalar by its value (strings: non-empty), else non-empty."""
    if type(value) is np.bool_:     # what comparisons give: a loop's condition, each iteration
        return bool(value)
    array = np.asarray(value)
    if array.ndim == 0:
        item = array.item()
        return len(item) > 0 if isinstance(item, (bytes, str)) else bool(item)
    return array.size > 0


def _branch(op, ctx, attr_name: str, repeated: bool = False):
    func = op.get_attr(attr_name)
    return function_plan(ctx, op.graph.library, func.name, call_attrs_of(op, attr_name), op, repeated=repeated)


def _single(values):
    return values if len(values) != 1 else values[0]


@kernel("If")
@kernel("StatelessIf")
def _if(op, ctx):
    then_run, else_run = _branch(op, ctx, "then_branch"), _branch(op, ctx, "else_branch")

    def run(cond, *inputs):
        return _single((then_run if _truth(cond) else else_run)(inputs))
    return run


@kernel("Case")
@kernel("StatelessCase")
def _case(op, ctx):
    branches = []
    for func in op.get_attr("branches"):
        branches.append(function_plan(ctx, op.graph.library, func.name,
                                      {e.key: e.value for e in func.attr}, op))

    def run(index, *inputs):
        i = int(index)
        chosen = branches[i] if 0 <= i < len(branches) else branches[-1]   # TensorFlow: out of range -> last
        return _single(chosen(inputs))
    return run


@kernel("While")
@kernel("StatelessWhile")
def _while(op, ctx):
    cond_run, body_run = _branch(op, ctx, "cond", repeated=True), _branch(op, ctx, "body", repeated=True)
    limit = ctx.loop_iteration_limit or _NO_LIMIT
    deadlines, seconds = ctx.deadlines, ctx.loop_timeout

    def run(*values):
        # Bounded by the iteration limit, the loop's own time limit and the run's deadline
        # (gradreg.deadline), checked at each iteration.
        iterations = 0
        end = deadline.loop_end(deadlines, seconds)
        while _truth(cond_run(values)[0]):
            values = body_run(values)
            iterations += 1
            if iterations > limit:
                raise IterationLimitError(f"{describe_node(op.name, op.type)}: loop ran more than {limit} "
                                          f"iterations (Session(loop_iteration_limit=...), "
                                          f"{config.how_to_raise('max_loop_iterations')})", op.name, op.type)
            if clock() > end:
                raise deadline.loop_error(deadlines, seconds, describe_node(op.name, op.type), iterations,
                                          op.name, op.type)
        return _single(values)
    return run


_NO_LIMIT = 1 << 63
clock = deadline.clock


# -- TensorLists ----------------------------------------------------------------------------

class _Slots:
    """The dense storage of a reserved TensorList: one array of all elements, written in place
    only where no version of the list has an element yet, so every version stays intact.
    ``written[i]`` is the list version that first set element i (None: not yet)."""

    __slots__ = ("array", "element_shape", "written", "version", "unwritten", "complete")

    def __init__(self, array: np.ndarray):
        self.array = array
        self.element_shape = array.shape[1:]
        self.written: list = [None] * len(array)
        self.version = 0            # the newest list version sharing these slots
        self.unwritten = len(array)
        self.complete = 0 if not len(array) else None   # version from which every slot is set


class TensorList:
    """An immutable list of tensors (a DT_VARIANT value). Push/pop share structure: each list
    is a chain of cells from the last element back, so pushing and popping are O(1) and a
    popped element is freed once no list holds it.

    A list reserved with a fully known element shape (TensorListReserve) keeps its elements in
    one array instead (``slots``, this list being version ``version`` of it): setting an element
    that no version has set writes in place, from the newest version, so stacking a fully set
    list is that array itself — the form gradreg's loop gradients collect per-iteration values
    in. Anything else converts to cells first."""

    __slots__ = ("element_dtype", "element_shape", "last", "length", "_items", "slots", "version")

    def __init__(self, element_dtype, element_shape, last, length, slots=None, version=0):
        self.element_dtype = element_dtype
        self.element_shape = element_shape       # list of int|None, or None for unknown rank
        self.last = last                          # (value, previous cell) or None
        self.length = length
        self._items = None
        self.slots = slots
        self.version = version

    @classmethod
    def from_items(cls, element_dtype, element_shape, items):
        last = None
        for item in items:
            last = (item, last)
        return cls(element_dtype, element_shape, last, len(items))

    def items(self) -> list:
        """The elements in order (cached; uninitialized elements are None)."""
        if self._items is None:
            if self.slots is not None:
                array, written, version = self.slots.array, self.slots.written, self.version
                out = [array[i] if w is not None and w <= version else None for i, w in enumerate(written)]
            else:
                out, cell = [], self.last
                while cell is not None:
                    out.append(cell[0])
                    cell = cell[1]
                out.reverse()
            self._items = out
        return self._items

    def get(self, i: int):
        """Element i (None when uninitialized)."""
        slots = self.slots
        if slots is not None:
            w = slots.written[i]
            return slots.array[i] if w is not None and w <= self.version else None
        return self.items()[i]

    def linked(self) -> TensorList:
        """This list as a chain of cells (itself unless it is slot-backed)."""
        if self.slots is None:
            return self
        return TensorList.from_items(self.element_dtype, self.element_shape, self.items())

    def set_in_place(self, i: int, item) -> TensorList | None:
        """The next version with element i set, written into the shared slots; None when that
        would change what another version sees (then the caller copies)."""
        slots = self.slots
        if (slots is None or slots.version != self.version or slots.written[i] is not None
                or type(item) is not np.ndarray or item.shape != slots.element_shape
                or item.dtype != slots.array.dtype):
            return None
        slots.array[i] = item
        version = slots.version = self.version + 1
        slots.written[i] = version
        slots.unwritten -= 1
        if not slots.unwritten:
            slots.complete = version
        return TensorList(self.element_dtype, self.element_shape, None, self.length, slots, version)

    def dense(self) -> np.ndarray | None:
        """All elements as one array when every one is set in this version (shared, not copied)."""
        slots = self.slots
        if slots is not None and slots.complete is not None and slots.complete <= self.version:
            return slots.array
        return None

    # -- the variant protocol (gradreg.registry.kernels.VariantValue): ZerosLike and AddN ------
    def zeros_like(self) -> TensorList:
        """The same list with every set element zero; unset elements stay unset (TensorFlow)."""
        dense = self.dense()
        if dense is not None:
            return TensorList.from_dense(self.element_dtype, np.zeros_like(dense))
        items = [None if v is None else _zeros_like_element(v) for v in self.items()]
        return TensorList.from_items(self.element_dtype, self.element_shape, items)

    def add(self, other) -> TensorList:
        """Element-wise sum with a list of the same length and element type; an unset element
        takes the other list's element (TensorFlow's TensorListBinaryAdd)."""
        if not isinstance(other, TensorList):
            raise ValueError(f"cannot add a TensorList and {other!r}")
        if other.element_dtype is not self.element_dtype:
            raise ValueError(f"cannot add lists of {self.element_dtype.name} and {other.element_dtype.name}")
        if other.length != self.length:
            raise ValueError(f"cannot add lists of different lengths: {self.length} and {other.length}")
        a, b = self.dense(), other.dense()
        if a is not None and b is not None:
            if a.shape != b.shape:
                raise ValueError(f"cannot add list elements of shapes {list(a.shape[1:])} and {list(b.shape[1:])}")
            return TensorList.from_dense(self.element_dtype, a + b)
        items = [_add_elements(x, y) for x, y in zip(self.items(), other.items())]
        return TensorList.from_items(self.element_dtype, _merged_shape(self.element_shape, other.element_shape),
                                     items)

    @classmethod
    def from_dense(cls, element_dtype, array: np.ndarray) -> TensorList:
        """A fully set, slot-backed list holding the rows of ``array`` (not copied)."""
        slots = _Slots(array)
        slots.written = [1] * len(array)
        slots.version = 1
        slots.unwritten = 0
        slots.complete = 1
        return cls(element_dtype, list(array.shape[1:]), None, len(array), slots, 1)

    def __repr__(self) -> str:
        return f"<TensorList of {self.length} {self.element_dtype.name}>"


def _zeros_like_element(value):
    """Zeros of a list element: an array's, or a variant's own (a list, a ragged tensor encoding)."""
    if hasattr(value, "zeros_like"):
        return value.zeros_like()
    return np.zeros_like(value)


def _add_elements(x, y):
    if x is None:
        return y
    if y is None:
        return x
    if hasattr(x, "add"):      # a variant element: a TensorList, a ragged tensor encoding, ...
        return x.add(y)
    if np.shape(x) != np.shape(y):
        raise ValueError(f"cannot add list elements of shapes {list(np.shape(x))} and {list(np.shape(y))}")
    return np.add(x, y)


def _merged_shape(a, b):
    """The more specific of two compatible element shapes (ValueError if they conflict)."""
    if a is None or b is None:
        return b if a is None else a
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        raise ValueError(f"cannot add lists with element shapes {a} and {b}")
    return [x if x is not None else y for x, y in zip(a, b)]


def _shape_value(shape) -> list | None:
    array = np.asarray(shape)
    if array.ndim == 0:
        return None if int(array) == -1 else []
    return [None if int(d) < 0 else int(d) for d in array.reshape(-1)]


def _zeros(op, ctx, element_shape, dtype):
    if element_shape is None or None in element_shape:
        raise ValueError(f"an uninitialized TensorList element needs a fully known element shape, "
                         f"have {element_shape}")
    ctx.check_shape(element_shape, op)
    return np.zeros(element_shape, dtype=dtype.storage)


@kernel("EmptyTensorList")
def _empty_list(op, ctx):
    dtype = op.get_attr("element_dtype")
    return lambda element_shape, max_num_elements: TensorList(dtype, _shape_value(element_shape), None, 0)


@kernel("TensorListReserve")
def _reserve(op, ctx):
    dtype = op.get_attr("element_dtype")
    dense = dtype.storage.kind in "biufc"
    recycler = ks.Recycler()   # a loop gradient's per-iteration values: the same size each call

    def reserve(element_shape, num_elements):
        n = int(num_elements)
        if n < 0:
            raise ValueError(f"TensorListReserve needs a non-negative number of elements, got {n}")
        ctx.check_elements(n, op)
        shape = _shape_value(element_shape)
        if dense and shape is not None and None not in shape:
            ctx.check_shape([n, *shape], op)
            return TensorList(dtype, shape, None, n, _Slots(recycler.empty((n, *shape), dtype.storage)))
        return TensorList.from_items(dtype, shape, [None] * n)
    return reserve


@kernel("TensorListFromTensor")
def _from_tensor(op, ctx):
    dtype = op.get_attr("element_dtype")

    def from_tensor(tensor, element_shape):
        array = np.asarray(tensor)
        if array.ndim == 0:
            raise ValueError("TensorListFromTensor needs a tensor of rank at least 1")
        return TensorList.from_items(dtype, list(array.shape[1:]), list(array))
    return from_tensor


@kernel("TensorListPushBack")
def _push_back(op, ctx):
    def push_back(handle, tensor):
        handle = handle.linked()
        return TensorList(handle.element_dtype, handle.element_shape, (tensor, handle.last), handle.length + 1)
    return push_back


@kernel("TensorListPopBack")
def _pop_back(op, ctx):
    def pop_back(handle, element_shape):
        handle = handle.linked()
        if handle.last is None:
            raise ValueError("TensorListPopBack on an empty list")
        value, previous = handle.last
        if value is None:
            value = _zeros(op, ctx, handle.element_shape or _shape_value(element_shape), handle.element_dtype)
        return TensorList(handle.element_dtype, handle.element_shape, previous, handle.length - 1), value
    return pop_back


@kernel("TensorListStack")
def _stack_list(op, ctx):
    dtype = op.get_attr("element_dtype")
    recycler = ks.Recycler()

    def stack(handle, element_shape):
        dense = handle.dense()
        if dense is not None:
            return dense
        items = handle.items()
        shape = handle.element_shape if handle.element_shape is not None else _shape_value(element_shape)
        if not items:
            if shape is None or None in shape:
                raise ValueError("TensorListStack of an empty list needs a fully known element shape")
            return np.zeros([0] + shape, dtype=dtype.storage)
        storage = dtype.storage
        first = items[0]
        if type(first) is np.ndarray and first.ndim and all(
                type(v) is np.ndarray and v.dtype == storage and v.shape == first.shape for v in items):
            # One concatenation along the rows, then a view: half np.stack's time (it makes a
            # new-axis view of every element first).
            out = recycler.empty((len(items) * first.shape[0], *first.shape[1:]), storage)
            return np.concatenate(items, out=out).reshape(len(items), *first.shape)
        if all(type(v) is np.ndarray and v.dtype == storage for v in items):
            return np.stack(items)     # np.stack checks that the shapes agree
        filled = [v if v is not None else _zeros(op, ctx, shape, dtype) for v in items]
        return np.stack([np.asarray(v, dtype=storage) for v in filled])
    return stack


@kernel("TensorListGetItem")
def _get_item(op, ctx):
    def get_item(handle, index, element_shape):
        i = int(index)
        if not 0 <= i < handle.length:
            raise IndexError(f"TensorListGetItem index {i} out of range for a list of {handle.length}")
        value = handle.get(i)
        if value is None:
            value = _zeros(op, ctx, handle.element_shape or _shape_value(element_shape), handle.element_dtype)
        return value
    return get_item


@kernel("TensorListSetItem")
def _set_item(op, ctx):
    resize = op.get_attr("resize_if_index_out_of_bounds")

    def set_item(handle, index, item):
        i = int(index)
        if 0 <= i < handle.length:
            updated = handle.set_in_place(i, item)
            if updated is not None:
                return updated
        items = list(handle.items())
        if i >= len(items) and resize:
            items.extend([None] * (i + 1 - len(items)))
        if not 0 <= i < len(items):
            raise IndexError(f"TensorListSetItem index {i} out of range for a list of {len(items)}")
        items[i] = item
        return TensorList.from_items(handle.element_dtype, handle.element_shape, items)
    return set_item


@kernel("TensorListLength")
def _length(op, ctx):
    return lambda handle: np.int32(handle.length)


@kernel("TensorListElementShape")
def _element_shape(op, ctx):
    out_type = op.get_attr("shape_type").storage

    def element_shape(handle):
        if handle.element_shape is None:
            return np.array(-1, dtype=out_type)
        return np.array([-1 if d is None else d for d in handle.element_shape], dtype=out_type)
    return element_shape



def _element(op, ctx, handle, i: int, element_shape):
    """Element i of ``handle``; zeros (of the list's or the given element shape) if unset."""
    value = handle.get(i)
    if value is None:
        value = _zeros(op, ctx, handle.element_shape or _shape_value(element_shape), handle.element_dtype)
    return value


def _stacked(op, ctx, dtype, items: list, element_shape) -> np.ndarray:
    """``items`` (arrays) stacked on a new first axis; an empty list needs a known element shape."""
    if not items:
        shape = _shape_value(element_shape)
        if shape is None or None in shape:
            raise ValueError("gathering no elements needs a fully known element shape")
        return np.zeros([0, *shape], dtype=dtype.storage)
    return np.stack([np.asarray(v, dtype=dtype.storage) for v in items])


@kernel("TensorListGather")
def _gather(op, ctx):
    dtype = op.get_attr("element_dtype")

    def gather(handle, indices, element_shape):
        items = []
        for i in np.asarray(indices).reshape(-1).tolist():
            if not 0 <= i < handle.length:
                raise IndexError(f"index {i} out of range; list only has {handle.length} elements")
            items.append(_element(op, ctx, handle, i, element_shape))
        out = _stacked(op, ctx, dtype, items, element_shape)
        return out.reshape(np.shape(indices) + out.shape[1:])
    return gather


def _scattered(items: list, tensor, indices) -> list:
    """``items`` with row k of ``tensor`` set at ``indices[k]`` (the last write wins)."""
    rows = np.asarray(tensor)
    index = np.asarray(indices).reshape(-1)
    if len(index) != (rows.shape[0] if rows.ndim else -1):
        raise ValueError(f"scatter needs one row per index: {len(index)} indices for a tensor of shape "
                         f"{list(rows.shape)}")
    if len(index) and index.min() < 0:
        raise ValueError("indices in TensorListScatter must all be non-negative")
    for k, i in enumerate(index.tolist()):
        if i >= len(items):
            raise ValueError(f"trying to scatter at index {i} in a list of {len(items)} elements")
        items[i] = rows[k]
    return items


def _scatter_length(indices, num_elements: int) -> int:
    index = np.asarray(indices).reshape(-1)
    needed = int(index.max()) + 1 if len(index) else 0
    return needed if num_elements < 0 else num_elements


@kernel("TensorListScatter")
def _scatter(op, ctx):
    dtype = op.get_attr("element_dtype")

    def scatter(tensor, indices, element_shape):
        n = _scatter_length(indices, -1)
        ctx.check_elements(n, op)
        items = _scattered([None] * n, tensor, indices)
        return TensorList.from_items(dtype, _shape_value(element_shape), items)
    return scatter


@kernel("TensorListScatterV2")
def _scatter_v2(op, ctx):
    dtype = op.get_attr("element_dtype")

    def scatter(tensor, indices, element_shape, num_elements):
        n = _scatter_length(indices, int(num_elements))
        ctx.check_elements(n, op)
        items = _scattered([None] * n, tensor, indices)
        return TensorList.from_items(dtype, _shape_value(element_shape), items)
    return scatter


@kernel("TensorListScatterIntoExistingList")
def _scatter_into(op, ctx):
    def scatter(handle, tensor, indices):
        items = list(handle.items())
        needed = _scatter_length(indices, -1)
        items.extend([None] * (needed - len(items)))   # grows to reach every index (TensorFlow)
        items = _scattered(items, tensor, indices)
        return TensorList.from_items(handle.element_dtype, handle.element_shape, items)
    return scatter


@kernel("TensorListSplit")
def _split(op, ctx):
    dtype = op.get_attr("element_dtype")

    def split(tensor, element_shape, lengths):
        array = np.asarray(tensor)
        if array.ndim == 0:
            raise ValueError("TensorListSplit needs a tensor of rank at least 1")
        items, start = [], 0
        for length in np.asarray(lengths).reshape(-1).tolist():
            if length < 0 or start + length > array.shape[0]:
                raise ValueError(f"attempting to slice [{start}, {start + length}] from a tensor of length "
                                 f"{array.shape[0]}")
            items.append(array[start:start + length])
            start += length
        if start != array.shape[0]:
            raise ValueError(f"the lengths add up to {start}, the tensor has {array.shape[0]} rows")
        shape = _shape_value(element_shape)
        return TensorList.from_items(dtype, shape if shape is not None else [None, *array.shape[1:]], items)
    return split


def _concat(op, ctx, handle, element_shape, leading_dims):
    """The elements concatenated along their first axis, and each one's length. An unset element
    takes its length from ``leading_dims`` (else from a set element) and is zeros."""
    items = handle.items()
    shape = handle.element_shape if handle.element_shape is not None else element_shape
    known = next((np.shape(v) for v in items if v is not None), None)
    parts = []
    for i, value in enumerate(items):
        if value is None:
            dims = list(shape) if shape is not None else None
            if dims and dims[0] is None:
                dims[0] = int(leading_dims[i]) if i < len(leading_dims) else (known[0] if known else None)
            if dims is None or None in dims:
                dims = list(known) if known is not None else dims
            value = _zeros(op, ctx, dims, handle.element_dtype)
        parts.append(np.asarray(value, dtype=handle.element_dtype.storage))
    if not parts:
        if shape is None or None in shape[1:]:
            raise ValueError("concatenating an empty list needs the element shape beyond its first axis")
        empty = np.zeros([0, *shape[1:]], dtype=handle.element_dtype.storage)
        return empty, np.zeros(0, np.int64)
    if any(p.ndim == 0 for p in parts):
        raise ValueError("TensorListConcat needs elements of rank at least 1")
    return np.concatenate(parts), np.array([p.shape[0] for p in parts], np.int64)


@kernel("TensorListConcat")
def _concat_v1(op, ctx):
    attr = op.get_attr("element_shape")
    element_shape = None if attr.rank is None else list(attr.dims)
    return lambda handle: _concat(op, ctx, handle, element_shape, [])


@kernel("TensorListConcatV2")
def _concat_v2(op, ctx):
    def concat(handle, element_shape, leading_dims):
        return _concat(op, ctx, handle, _shape_value(element_shape), np.asarray(leading_dims).reshape(-1).tolist())
    return concat


@kernel("TensorListResize")
def _resize(op, ctx):
    def resize(handle, size):
        n = int(size)
        if n < 0:
            raise ValueError(f"TensorListResize needs a non-negative size, got {n}")
        ctx.check_elements(n, op)
        items = list(handle.items())[:n]
        items.extend([None] * (n - len(items)))
        return TensorList.from_items(handle.element_dtype, handle.element_shape, items)
    return resize


def _each_list(fn, *handles):
    """``fn`` applied to lists, or element-wise to arrays of lists (a batch of lists)."""
    if isinstance(handles[0], np.ndarray):
        out = np.empty(handles[0].shape, dtype=object)
        for index in np.ndindex(handles[0].shape):
            out[index] = fn(*(h[index] for h in handles))
        return out
    return fn(*handles)


@kernel("TensorListConcatLists")
def _concat_lists(op, ctx):
    def concat_two(a, b):
        if a.element_dtype is not b.element_dtype:
            raise ValueError(f"cannot concatenate lists of {a.element_dtype.name} and {b.element_dtype.name}")
        return TensorList.from_items(a.element_dtype, _merged_shape(a.element_shape, b.element_shape),
                                     list(a.items()) + list(b.items()))
    return lambda a, b: _each_list(concat_two, a, b)


@kernel("TensorListPushBackBatch")
def _push_back_batch(op, ctx):
    def push(handles, tensor):
        lists = np.asarray(handles, dtype=object)
        rows = np.asarray(tensor)
        if lists.ndim != 1 or rows.ndim < 1 or rows.shape[0] != lists.shape[0]:
            raise ValueError(f"TensorListPushBackBatch needs a vector of lists and one row per list; got "
                             f"{list(lists.shape)} lists and a tensor of shape {list(rows.shape)}")
        out = np.empty(lists.shape, dtype=object)
        for i, handle in enumerate(lists):
            linked = handle.linked()
            out[i] = TensorList(linked.element_dtype, linked.element_shape, (rows[i], linked.last), linked.length + 1)
        return out
    return push

# -- Optionals ------------------------------------------------------------------------------

class Optional:
    """A DT_VARIANT holding a tuple of values, or nothing (TensorFlow's OptionalVariant)."""

    __slots__ = ("values",)

    def __init__(self, values: tuple | None):
        self.values = values

    def zeros_like(self) -> Optional:
        """Zeros of each value; an empty optional stays empty (TensorFlow's OptionalZerosLike)."""
        if self.values is None:
            return self
        return Optional(tuple(v.zeros_like() if hasattr(v, "zeros_like") else np.zeros_like(v) for v in self.values))

    def add(self, other) -> Optional:
        """Value-wise sum; two empty optionals give an empty one, one empty and one not is an error."""
        if not isinstance(other, Optional):
            raise ValueError(f"cannot add an Optional and {other!r}")
        if self.values is None and other.values is None:
            return self
        mine, theirs = self.values, other.values
        if mine is None or theirs is None:
            raise ValueError("cannot add optionals because one has a value and the other doesn't")
        if len(mine) != len(theirs):
            raise ValueError(f"cannot add optionals of {len(mine)} and {len(theirs)} values")
        return Optional(tuple(a.add(b) if hasattr(a, "add") else np.add(a, b) for a, b in zip(mine, theirs)))

    def __repr__(self) -> str:
        return "<Optional: none>" if self.values is None else f"<Optional of {len(self.values)} values>"


_NONE = Optional(None)
kernel("OptionalFromValue")(lambda op, ctx: lambda *values: Optional(tuple(values)))
kernel("OptionalNone")(lambda op, ctx: lambda: _NONE)
kernel("OptionalHasValue")(lambda op, ctx: lambda optional: np.bool_(optional.values is not None))


@kernel("OptionalGetValue")
def _optional_get_value(op, ctx):
    def get_value(optional):
        if optional.values is None:
            raise ValueError("the optional does not have a value")
        return _single(optional.values)
    return get_value


# -- composite tensors as variants ------------------------------------------------------------------

def _differentiable(value) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "fc"


class CompositeTensorVariant:
    """A DT_VARIANT holding a composite tensor's components and its type spec (``metadata``,
    TensorFlow's serialized CompositeTensorVariantMetadata, kept as bytes). Zeros and sums act on
    the float and complex components; the others (a ragged tensor's row splits) are structure,
    kept (and must agree in a sum)."""

    __slots__ = ("metadata", "components")

    def __init__(self, metadata: bytes, components: tuple):
        self.metadata = metadata
        self.components = components

    def zeros_like(self) -> CompositeTensorVariant:
        return CompositeTensorVariant(self.metadata, tuple(
            np.zeros_like(c) if _differentiable(c) else c for c in self.components))

    def add(self, other) -> CompositeTensorVariant:
        if not isinstance(other, CompositeTensorVariant) or other.metadata != self.metadata:
            raise ValueError(f"cannot add composite tensor variants of different type specs ({other!r})")
        summed = []
        for mine, theirs in zip(self.components, other.components):
            if np.shape(mine) != np.shape(theirs):
                raise ValueError(f"cannot add composite tensor components of shapes {list(np.shape(mine))} and "
                                 f"{list(np.shape(theirs))}")
            if _differentiable(mine):
                summed.append(mine + theirs)
            elif not np.array_equal(mine, theirs):
                raise ValueError("cannot add composite tensor variants whose structure (non-float components) differs")
            else:
                summed.append(mine)
        return CompositeTensorVariant(self.metadata, tuple(summed))

    def __repr__(self) -> str:
        return f"<CompositeTensorVariant of {len(self.components)} components>"


@kernel("CompositeTensorVariantFromComponents")
def _composite_from_components(op, ctx):
    metadata = op.get_attr("metadata")
    return lambda *components: CompositeTensorVariant(metadata, tuple(components))


@kernel("CompositeTensorVariantToComponents")
def _composite_to_components(op, ctx):
    metadata = op.get_attr("metadata")
    types = op.get_attr("Tcomponents")

    def to_components(encoded):
        if not isinstance(encoded, CompositeTensorVariant):
            raise ValueError(f"Expected a CompositeTensorVariant, got {encoded!r}")
        if encoded.metadata != metadata:
            raise ValueError("TypeSpec mismatch: the encoded value's metadata differs from the op's")
        if len(encoded.components) != len(types) or any(
                np.asarray(c).dtype != t.storage for c, t in zip(encoded.components, types)):
            raise ValueError(f"Encoded value has {len(encoded.components)} components of types "
                             f"{[np.asarray(c).dtype.name for c in encoded.components]}, expected "
                             f"{[t.name for t in types]}")
        return _single(encoded.components)
    return to_components
