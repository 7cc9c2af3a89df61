"""Mutations of a seed graph: structural (on the GraphDef), byte (on the binary file) and text
(on the .pbtxt), each deterministic given a ``random.Random``.

A mutator returns a description of what it did, or None when it does not apply to the graph.
Structural mutators declare whether they preserve the graph's meaning (``PRESERVING``): the
oracle then also compares the values with the unmutated seed's.
"""
from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf import text_format

from gradreg.proto import attr_value_pb2, function_pb2, graph_pb2, types_pb2

from .seeds import Seed

# Numbers that break things: zero, one off the ends, the int32/int64 edges, sizes that allocate
# gigabytes, negative sizes.
INTERESTING_INTS = [0, 1, -1, 2, 3, 7, 255, 256, 2**15, 2**31 - 1, 2**31, -2**31, 2**32, 2**62, 2**63 - 1, -2**63,
                    10**6, 10**8, 10**9, 10**12, -5, -100]
INTERESTING_FLOATS = [0.0, -0.0, 1e-45, 1e38, 3.5e38, float("inf"), float("-inf"), float("nan"), -1.0, 1e300, 0.5]
DTYPE_ENUMS = [e for e in types_pb2.DataType.values() if e not in (0,)]
HUGE_COUNTS = [10**8, 2**31 - 1, 10**6, 5000, -1, 0]


@dataclass
class Mutant:
    """A file to give gradreg, with the feeds, fetches and gradient request that go with it."""
    data: bytes
    suffix: str                        # ".pb" or ".pbtxt"
    how: list[str]
    preserves: bool                    # same values as the seed expected
    feeds: dict = field(default_factory=dict)
    fetches: list[str] = field(default_factory=list)
    grad: tuple | None = None
    feed_file: bytes | None = None     # a hostile .npz/.npy for the command line and the feed reader
    feed_suffix: str = ".npz"


# -- helpers ------------------------------------------------------------------------------------

def _pick_node(rng: random.Random, gd: graph_pb2.GraphDef, want: Callable[[object], bool] = lambda n: True):
    nodes = [n for n in gd.node if want(n)]
    return rng.choice(nodes) if nodes else None


def _all_node_lists(gd: graph_pb2.GraphDef) -> list:
    """The node lists of the graph and of each library function (mutations reach both)."""
    return [gd.node] + [f.node_def for f in gd.library.function]


def _pick_any_node(rng: random.Random, gd: graph_pb2.GraphDef, want: Callable[[object], bool] = lambda n: True):
    lists = [lst for lst in _all_node_lists(gd) if any(want(n) for n in lst)]
    if not lists:
        return None, None
    lst = rng.choice(lists)
    return rng.choice([n for n in lst if want(n)]), lst


def _attr(node, key: str):
    for entry in node.attr:
        if entry.key == key:
            return entry.value
    return None


def _set_attr(node, key: str) -> attr_value_pb2.AttrValue:
    for entry in node.attr:
        if entry.key == key:
            entry.value.Clear()
            return entry.value
    entry = node.attr.add()
    entry.key = key
    return entry.value


def _data_inputs(node) -> list[int]:
    return [i for i, text in enumerate(node.input) if not text.startswith("^")]


# -- structural mutations (may change the meaning) ----------------------------------------------

def drop_input(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd, lambda n: len(n.input) > 0)
    if node is None:
        return None
    i = rng.randrange(len(node.input))
    text = node.input[i]
    del node.input[i]
    return f"drop input {i} ('{text}') of '{node.name}'"


def duplicate_input(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd, lambda n: len(_data_inputs(n)) > 0)
    if node is None:
        return None
    i = rng.choice(_data_inputs(node))
    node.input.insert(i, node.input[i])
    return f"duplicate input {i} of '{node.name}'"


def retarget_input(rng, gd, seed):
    node, nodes = _pick_any_node(rng, gd, lambda n: len(n.input) > 0)
    if node is None:
        return None
    i = rng.randrange(len(node.input))
    other = rng.choice(nodes).name
    port = rng.choice([0, 0, 0, 1, 2, 5, 100, 10**8, 2**31, 2**63, -1])
    style = rng.random()
    if style < 0.1:
        text = f"^{other}"
    elif style < 0.2:
        text = rng.choice([f"{other}:{port}:0", f"{other}:out:{rng.choice(['inf', '-1', '99', '0x1'])}",
                           f"{other}:", ":0", "", f"{other}:١"])
    else:
        text = f"{other}:{port}" if port else other
    old = node.input[i]
    node.input[i] = text
    return f"input {i} of '{node.name}': '{old}' -> '{text}'"


def add_cycle(rng, gd, seed):
    node = _pick_node(rng, gd, lambda n: len(_data_inputs(n)) > 0)
    if node is None:
        return None
    consumer = _pick_node(rng, gd, lambda n: any(t.split(":")[0].lstrip("^") == node.name for t in n.input))
    if consumer is None:
        return None
    if rng.random() < 0.5:
        node.input.append(f"^{consumer.name}")
    else:
        node.input[rng.choice(_data_inputs(node))] = consumer.name
    return f"cycle: '{node.name}' <- '{consumer.name}'"


def change_op(rng, gd, seed):
    from gradreg.registry import get_registry
    node, _ = _pick_any_node(rng, gd)
    if node is None:
        return None
    if rng.random() < 0.15:
        new = rng.choice(["FrobnicateV7", "", "Const ", "const", "Placeholder\x00", "\u00e9t\u00e9"])
    else:
        new = rng.choice(sorted(get_registry().ops.keys()))
    old = node.op
    node.op = new
    return f"op of '{node.name}': {old} -> {new!r}"


def change_dtype_attr(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd, lambda n: any(e.value.WhichOneof("value") == "type" for e in n.attr))
    if node is None:
        return None
    entry = rng.choice([e for e in node.attr if e.value.WhichOneof("value") == "type"])
    old = entry.value.type
    new = rng.choice(DTYPE_ENUMS + [0, 999, old + 100])
    entry.value.type = new
    return f"attr '{entry.key}' of '{node.name}': type {old} -> {new}"


def _wrong_kind_value(rng, value: attr_value_pb2.AttrValue) -> str:  # noqa: C901 (one case per kind)
    kind = rng.choice(["i", "f", "s", "b", "type", "shape", "list_i", "list_type", "tensor", "func", "placeholder",
                       "empty", "list_empty", "shape_float"])
    value.Clear()
    if kind == "i":
        value.i = rng.choice(INTERESTING_INTS)
    elif kind == "f":
        value.f = rng.choice(INTERESTING_FLOATS)
    elif kind == "s":
        value.s = rng.choice([b"", b"SAME", b"NHWC", b"\xff\xfe", b"DT_FLOAT", b"x" * 1000])
    elif kind == "b":
        value.b = True
    elif kind == "type":
        value.type = rng.choice(DTYPE_ENUMS)
    elif kind == "shape":
        for d in rng.sample([1, 2, 3, -1, 10**8, -7, 0], rng.randrange(0, 4)):
            value.shape.dim.add(size=d)
    elif kind == "shape_float":
        value.f = 2.5
    elif kind == "list_i":
        value.list.i.extend(rng.sample(INTERESTING_INTS, 3))
    elif kind == "list_type":
        value.list.type.extend([types_pb2.DT_FLOAT, types_pb2.DT_INT32])
    elif kind == "tensor":
        value.tensor.dtype = rng.choice(DTYPE_ENUMS)
        value.tensor.tensor_shape.dim.add(size=rng.choice([1, 2, 10**9]))
    elif kind == "func":
        value.func.name = rng.choice(["nope", "", "PartitionedCall"])
    elif kind == "placeholder":
        value.placeholder = "T"
    elif kind == "list_empty":
        value.list.SetInParent()
    return kind


def attr_wrong_kind(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd, lambda n: len(n.attr) > 0)
    if node is None:
        return None
    entry = rng.choice(list(node.attr))
    kind = _wrong_kind_value(rng, entry.value)
    return f"attr '{entry.key}' of '{node.name}' made {kind}"


def attr_huge(rng, gd, seed):
    """Counts, sizes and indices at the edges: N, num_split, axis, ksize, shapes."""
    node, _ = _pick_any_node(rng, gd, lambda n: any(e.value.WhichOneof("value") in ("i", "list", "shape")
                                                   for e in n.attr))
    if node is None:
        return None
    entry = rng.choice([e for e in node.attr if e.value.WhichOneof("value") in ("i", "list", "shape")])
    kind = entry.value.WhichOneof("value")
    if kind == "i":
        entry.value.i = rng.choice(INTERESTING_INTS + HUGE_COUNTS)
    elif kind == "shape":
        dims = entry.value.shape.dim
        if len(dims) and rng.random() < 0.7:
            rng.choice(list(dims)).size = rng.choice(INTERESTING_INTS)
        else:
            dims.add(size=rng.choice(INTERESTING_INTS))
    else:
        lst = entry.value.list
        if len(lst.i):
            lst.i[rng.randrange(len(lst.i))] = rng.choice(INTERESTING_INTS)
        elif len(lst.type):
            lst.type.append(rng.choice(DTYPE_ENUMS))
        else:
            lst.i.extend([rng.choice(INTERESTING_INTS)])
    return f"attr '{entry.key}' of '{node.name}' pushed to an edge"


def remove_attr(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd, lambda n: len(n.attr) > 0)
    if node is None:
        return None
    i = rng.randrange(len(node.attr))
    key = node.attr[i].key
    del node.attr[i]
    return f"remove attr '{key}' of '{node.name}'"


def add_attr(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd)
    if node is None:
        return None
    key = rng.choice(["fuzz", "N", "T", "dtype", "shape", "value", "axis", "Tidx", "_class", "num_split"])
    kind = _wrong_kind_value(rng, _set_attr(node, key))
    return f"add attr '{key}' ({kind}) to '{node.name}'"


def mutate_const(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd, lambda n: n.op == "Const" and _attr(n, "value") is not None)
    if node is None:
        return None
    tensor = _attr(node, "value").tensor
    choice = rng.randrange(9)
    if choice == 0:
        tensor.dtype = rng.choice(DTYPE_ENUMS)
        what = f"tensor dtype {tensor.dtype}"
    elif choice == 1:
        # an earlier mutation of the chain may have removed the attr: then it is added
        _set_attr(node, "dtype").type = rng.choice(DTYPE_ENUMS)
        what = "dtype attr"
    elif choice == 2:
        tensor.tensor_shape.dim.add(size=rng.choice(INTERESTING_INTS))
        what = "tensor shape grown"
    elif choice == 3:
        tensor.tensor_content = tensor.tensor_content[: rng.randrange(len(tensor.tensor_content) + 1)] \
            if tensor.tensor_content else bytes(rng.randrange(64))
        what = "tensor content cut"
    elif choice == 4:
        tensor.float_val.extend([rng.choice(INTERESTING_FLOATS)] * rng.randrange(1, 5))
        what = "float_val added"
    elif choice == 5:
        tensor.int64_val.extend(rng.sample(INTERESTING_INTS, 2))
        what = "int64_val added"
    elif choice == 6:
        tensor.string_val.append(rng.choice([b"\xff\xfe", b"abc", b""]))
        what = "string_val added"
    elif choice == 7:
        tensor.tensor_shape.unknown_rank = True
        what = "unknown rank"
    else:
        tensor.version_number = rng.choice([-1, 0, 2**31 - 1])
        tensor.half_val.extend([1, 2])
        what = "half_val added"
    return f"Const '{node.name}': {what}"


def delete_node(rng, gd, seed):
    node, lst = _pick_any_node(rng, gd)
    if node is None:
        return None
    name = node.name
    lst.remove(node)
    return f"delete node '{name}'"


def duplicate_node(rng, gd, seed):
    node, lst = _pick_any_node(rng, gd)
    if node is None:
        return None
    copy_ = lst.add()
    copy_.CopyFrom(node)
    if rng.random() < 0.5:
        copy_.name = node.name + "_fuzzcopy"
        return f"copy node '{node.name}' as '{copy_.name}'"
    return f"duplicate node '{node.name}'"


def rename_node(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd)
    if node is None:
        return None
    old = node.name
    node.name = rng.choice(["", "a:b", "^x", "x" * 300, "\u00e9", old.upper(), old + "/", "_" + old, old + ":0"])
    return f"rename '{old}' -> '{node.name}' (references unchanged)"


def non_utf8_string(rng, gd, seed):
    node, _ = _pick_any_node(rng, gd, lambda n: any(e.value.WhichOneof("value") == "s" for e in n.attr))
    if node is None:
        return None
    entry = rng.choice([e for e in node.attr if e.value.WhichOneof("value") == "s"])
    entry.value.s = rng.choice([b"\xff\xfe\xfd", b"\xc3", b"SAME\x80", b"\x00"])
    return f"attr '{entry.key}' of '{node.name}' made non-UTF-8"


def huge_count(rng, gd, seed):
    """The findings of issue 16: N = 10**8 on a list input, num_split = 10**8, x:100000000."""
    node, _ = _pick_any_node(rng, gd, lambda n: n.op in ("AddN", "Pack", "ConcatV2", "IdentityN", "Split",
                                                         "SplitV", "Unpack", "ConcatV2", "DynamicStitch")
                             or len(n.input) > 0)
    if node is None:
        return None
    for key in ("N", "num_split", "num"):
        if _attr(node, key) is not None:
            _attr(node, key).i = rng.choice(HUGE_COUNTS)
            return f"attr '{key}' of '{node.name}' = {_attr(node, key).i}"
    i = rng.randrange(len(node.input)) if len(node.input) else None
    if i is None:
        return None
    name = node.input[i].lstrip("^").split(":")[0]
    node.input[i] = f"{name}:{rng.choice(HUGE_COUNTS[:3])}"
    return f"input {i} of '{node.name}' = '{node.input[i]}'"


# -- control flow and functions -----------------------------------------------------------------

def endless_loop(rng, gd, seed):
    """LoopCond fed a constant True: the loop never ends (v1); a While whose cond always says yes (v2)."""
    node, lst = _pick_any_node(rng, gd, lambda n: n.op == "LoopCond")
    if node is not None:
        const = lst.add(name=node.name + "_fuzztrue", op="Const")
        _set_attr(const, "dtype").type = types_pb2.DT_BOOL
        value = _set_attr(const, "value").tensor
        value.dtype = types_pb2.DT_BOOL
        value.bool_val.append(True)
        ctrl = [t for t in node.input if not t.startswith("^")]
        const.input.extend([f"^{ctrl[0].split(':')[0]}"] if ctrl else [])
        if ctrl:   # an earlier mutation may have left the LoopCond with no data input
            node.input[list(node.input).index(ctrl[0])] = const.name
        else:
            node.input.insert(0, const.name)
        return f"LoopCond '{node.name}' fed True"
    for fn in gd.library.function:
        for n in fn.node_def:
            if n.op in ("Less", "Greater", "LessEqual", "GreaterEqual", "NotEqual"):
                n.op = "NotEqual" if n.op != "NotEqual" else "Equal"
                return f"function '{fn.signature.name}': '{n.name}' comparison flipped"
    return None


def vector_loop_counter(rng, gd, seed):
    """The Enter of a loop counter fed a vector: the loop condition stops being a scalar."""
    node, lst = _pick_any_node(rng, gd, lambda n: n.op == "Enter" and any(
        m.op == "Const" and m.name == n.input[0].split(":")[0] for m in gd.node) if n.input else False)
    if node is None:
        return None
    source = next(m for m in gd.node if m.name == node.input[0].split(":")[0])
    tensor = _attr(source, "value").tensor
    tensor.tensor_shape.Clear()
    tensor.tensor_shape.dim.add(size=3)
    return f"loop input '{source.name}' made a vector"


def merge_outside_frame(rng, gd, seed):
    """A v1 Merge fed by a NextIteration with no Enter: the frame is gone."""
    node = _pick_node(rng, gd, lambda n: n.op == "Enter")
    if node is not None:
        node.op = "Identity"
        for i in reversed(range(len(node.attr))):
            if node.attr[i].key != "T":
                del node.attr[i]
        return f"Enter '{node.name}' made an Identity"
    inputs = [n for n in gd.node if _data_inputs(n)]
    if not inputs:
        return None
    src = rng.choice(inputs)
    nxt = gd.node.add(name="fuzz/NextIteration", op="NextIteration", input=[src.input[_data_inputs(src)[0]]])
    _set_attr(nxt, "T").type = types_pb2.DT_FLOAT
    merge = gd.node.add(name="fuzz/Merge", op="Merge", input=[src.input[_data_inputs(src)[0]], nxt.name])
    _set_attr(merge, "T").type = types_pb2.DT_FLOAT
    _set_attr(merge, "N").i = 2
    return "a Merge and NextIteration outside any frame"


def function_input_reference(rng, gd, seed):
    fns = [f for f in gd.library.function if any(len(n.input) for n in f.node_def) or len(f.ret)]
    if not fns:
        return None
    fn = rng.choice(fns)
    nodes = [n for n in fn.node_def if len(n.input)]
    args = [a.name for a in fn.signature.input_arg] or ["x"]
    bad = rng.choice([f"{rng.choice(nodes).name if nodes else 'n'}:out:inf", f"{args[0]}:5", f"{args[0]}:-1",
                      "nonexistent:z:0", f"{args[0]}:0:0:0", ":", f"{nodes[0].name if nodes else 'n'}:output:99"])
    if nodes and rng.random() < 0.8:
        node = rng.choice(nodes)
        i = rng.randrange(len(node.input))
        node.input[i] = bad
        return f"function '{fn.signature.name}': input {i} of '{node.name}' = '{bad}'"
    if len(fn.ret):
        key = rng.choice(list(fn.ret))
        fn.ret[key] = bad
        return f"function '{fn.signature.name}': ret '{key}' = '{bad}'"
    return None


def function_recursion(rng, gd, seed):
    """A function calling itself, or a chain of functions nested hundreds of calls deep."""
    calls = [(f, n) for f in gd.library.function for n in f.node_def
             if _attr(n, "f") is not None and _attr(n, "f").WhichOneof("value") == "func"]
    if not calls:
        return None
    fn, node = rng.choice(calls)
    if rng.random() < 0.5:
        _attr(node, "f").func.name = fn.signature.name
        return f"function '{fn.signature.name}' calls itself"
    depth = rng.choice([50, 150, 250, 600])
    previous = fn.signature.name
    for level in range(depth):
        wrapper = gd.library.function.add()
        wrapper.CopyFrom(fn)
        wrapper.signature.name = f"{fn.signature.name}_nest{level}"
        for n in wrapper.node_def:
            if _attr(n, "f") is not None and _attr(n, "f").WhichOneof("value") == "func":
                _attr(n, "f").func.name = previous
        previous = wrapper.signature.name
    for n in gd.node:
        if _attr(n, "f") is not None and _attr(n, "f").func.name == fn.signature.name:
            _attr(n, "f").func.name = previous
    return f"function '{fn.signature.name}' wrapped {depth} deep"


def function_signature(rng, gd, seed):
    if not len(gd.library.function):
        return None
    fn = rng.choice(list(gd.library.function))
    args = list(fn.signature.input_arg) + list(fn.signature.output_arg)
    if not args:
        return None
    arg = rng.choice(args)
    choice = rng.randrange(4)
    if choice == 0:
        arg.type = rng.choice(DTYPE_ENUMS + [0])
    elif choice == 1:
        arg.number_attr = "N"
    elif choice == 2:
        arg.type_list_attr = "nope"
    else:
        arg.name = rng.choice(["", "a b", arg.name + ":0"])
    return f"function '{fn.signature.name}': argument '{arg.name}' changed ({choice})"


def deep_nesting(rng, gd, seed):
    """An attr nested hundreds of levels deep through func attrs (protobuf recursion limits)."""
    node, _ = _pick_any_node(rng, gd)
    if node is None:
        return None
    depth = rng.choice([20, 40, 60, 100, 150, 300])
    value = _set_attr(node, "_fuzz_nested")
    for _ in range(depth):
        entry = value.func.attr.add()
        entry.key = "a"
        value = entry.value
    value.i = 1
    return f"attr nested {depth} deep on '{node.name}'"


def many_nodes(rng, gd, seed):
    """Thousands of unused nodes (the node-count limit; a fuzz run sets it low)."""
    count = rng.choice([2000, 20000])
    for i in range(count):
        node = gd.node.add(name=f"fuzz/many{i}", op="NoOp")
        if i and rng.random() < 0.5:
            node.input.append(f"^fuzz/many{i - 1}")
    return f"{count} NoOp nodes"


STRUCTURAL = [drop_input, duplicate_input, retarget_input, add_cycle, change_op, change_dtype_attr, attr_wrong_kind,
              attr_huge, remove_attr, add_attr, mutate_const, delete_node, duplicate_node, rename_node,
              non_utf8_string, huge_count, endless_loop, vector_loop_counter, merge_outside_frame,
              function_input_reference, function_recursion, function_signature, deep_nesting, many_nodes]

# -- structural mutations that keep the meaning ---------------------------------------------------


def shuffle_nodes(rng, gd, seed):
    nodes = list(gd.node)
    rng.shuffle(nodes)
    copies = [copy.deepcopy(n) for n in nodes]
    del gd.node[:]
    gd.node.extend(copies)
    return "shuffle node order"


def drop_private_attrs(rng, gd, seed):
    dropped = 0
    for nodes in _all_node_lists(gd):
        for node in nodes:
            for i in reversed(range(len(node.attr))):
                if node.attr[i].key in ("_output_shapes", "_class", "_XlaMustCompile", "_read_only_resource_inputs"):
                    del node.attr[i]
                    dropped += 1
    return f"drop {dropped} private attrs" if dropped else None


def add_unused_node(rng, gd, seed):
    node = gd.node.add(name="fuzz/unused", op="Const")
    _set_attr(node, "dtype").type = types_pb2.DT_FLOAT
    tensor = _set_attr(node, "value").tensor
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.float_val.append(1.5)
    return "add an unused Const"


_NO_IDENTITY_AFTER = {"NextIteration", "Enter", "RefEnter", "Exit", "LoopCond"}


def insert_identity(rng, gd, seed, dtypes: dict | None = None):
    """An Identity between a producer and one consumer (not on a loop's back edge or a ref)."""
    if not dtypes:
        return None
    by_name = {n.name: n for n in gd.node}
    candidates = []
    for node in gd.node:
        for i in _data_inputs(node):
            name, _, port = node.input[i].partition(":")
            tensor = f"{name}:{port or 0}"
            producer = by_name.get(name)
            enum = dtypes.get(tensor)
            if producer is None or enum is None or enum > 100 or enum in (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT):
                continue
            if producer.op in _NO_IDENTITY_AFTER or node.op in ("Merge", "Switch", "Enter", "RefEnter"):
                continue
            candidates.append((node, i, tensor, enum))
    if not candidates:
        return None
    node, i, tensor, enum = rng.choice(candidates)
    ident = gd.node.add(name=f"fuzz/identity_{len(gd.node)}", op="Identity", input=[node.input[i]])
    _set_attr(ident, "T").type = enum
    node.input[i] = ident.name
    return f"Identity on {tensor} before '{node.name}'"


PRESERVING = [shuffle_nodes, drop_private_attrs, add_unused_node, insert_identity]


# -- byte and text mutations ----------------------------------------------------------------------

def mutate_bytes(rng: random.Random, data: bytes, other: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    if not buf:
        return bytes(rng.randrange(256) for _ in range(8)), "random bytes"
    choice = rng.randrange(8)
    i = rng.randrange(len(buf))
    if choice == 0:
        buf[i] ^= 1 << rng.randrange(8)
        what = f"flip a bit at {i}"
    elif choice == 1:
        buf[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01])
        what = f"set byte {i}"
    elif choice == 2:
        n = rng.randrange(1, 16)
        buf[i:i] = bytes(rng.randrange(256) for _ in range(n))
        what = f"insert {n} bytes at {i}"
    elif choice == 3:
        n = rng.randrange(1, 64)
        del buf[i:i + n]
        what = f"delete {n} bytes at {i}"
    elif choice == 4:
        n = rng.randrange(1, 64)
        buf[i:i] = buf[i:i + n]
        what = f"duplicate {n} bytes at {i}"
    elif choice == 5:
        del buf[i:]
        what = f"truncate at {i}"
    elif choice == 6:
        j = rng.randrange(len(other) + 1) if other else 0
        buf = buf[:i] + bytearray(other[j:])
        what = f"splice another seed at {i}"
    else:
        # A varint made huge: lengths and counts read from the wire.
        buf[i:i + 1] = b"\xff\xff\xff\xff\x0f"
        what = f"huge varint at {i}"
    return bytes(buf), what


_NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])")
_DTYPE = re.compile(rb"DT_[A-Z0-9_]+")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def mutate_text(rng: random.Random, text: bytes) -> tuple[bytes, str]:  # noqa: C901 (one case per mutation)
    lines = text.split(b"\n")
    choice = rng.randrange(9)
    if choice == 0:
        matches = list(_NUMBER.finditer(text))
        if matches:
            m = rng.choice(matches)
            new = str(rng.choice(INTERESTING_INTS + INTERESTING_FLOATS[:5])).encode()
            return text[:m.start()] + new + text[m.end():], f"number at {m.start()} -> {new.decode()}"
    elif choice == 1:
        matches = list(_DTYPE.finditer(text))
        if matches:
            m = rng.choice(matches)
            new = rng.choice([b"DT_INT32", b"DT_FLOAT_REF", b"DT_STRING", b"DT_RESOURCE", b"DT_HALF", b"DT_INVALID",
                              b"DT_BOOL", b"DT_COMPLEX128", b"DT_QINT8", b"DT_VARIANT", b"7", b"1000"])
            return text[:m.start()] + new + text[m.end():], f"{m.group().decode()} -> {new.decode()}"
    elif choice == 2:
        matches = list(_STRING.finditer(text))
        if matches:
            m = rng.choice(matches)
            new = rng.choice([b'"\\377\\376"', b'""', b'"a:b:c"', b'"^^"', b'"x:100000000"', b'"\\000"'])
            return text[:m.start()] + new + text[m.end():], f"string at {m.start()} -> {new.decode()}"
    elif choice == 3 and len(lines) > 1:
        i = rng.randrange(len(lines))
        del lines[i]
        return b"\n".join(lines), f"delete line {i}"
    elif choice == 4 and len(lines) > 1:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[rng.randrange(len(lines))])
        return b"\n".join(lines), f"duplicate a line at {i}"
    elif choice == 5:
        depth = rng.choice([30, 40, 100, 200, 400])
        nested = b"attr { key: \"n\" value { func { name: \"f\" " * depth + b"} } } " * depth
        m = text.find(b"node {")
        if m >= 0:
            insert = m + len(b"node {")
            return text[:insert] + b" " + nested + text[insert:], f"attrs nested {depth} deep"
    elif choice == 6:
        i = rng.randrange(len(text) + 1)
        token = rng.choice([b"{", b"}", b"[", b":", b"\"", b"#", b"node {", b"\\", b"\x00", b"\xff"])
        return text[:i] + token + text[i:], f"insert {token!r} at {i}"
    elif choice == 7:
        m = text.find(b"op: \"")
        if m >= 0:
            end = text.find(b"\"", m + 5)
            from gradreg.registry import get_registry
            new = rng.choice(sorted(get_registry().ops.keys())).encode()
            return text[:m + 5] + new + text[end:], f"an op -> {new.decode()}"
    i = rng.randrange(len(text) + 1)
    return text[:i], f"truncate at {i}"


# -- the mutant ---------------------------------------------------------------------------------

def make_mutant(rng: random.Random, seed: Seed, other: Seed, dtypes: dict | None = None) -> Mutant:
    """One mutant of ``seed``: mostly structural (1-3 mutations), else byte or text mutations."""
    roll = rng.random()
    if roll < 0.12:
        data, how = mutate_bytes(rng, seed.binary, other.binary)
        return Mutant(data, ".pb", [how], False, dict(seed.feeds), list(seed.fetches), seed.grad)
    if roll < 0.24:
        text = seed.text or text_format.MessageToString(seed.graph_def).encode()
        hows = []
        for _ in range(rng.choice([1, 1, 2])):
            text, how = mutate_text(rng, text)
            hows.append(how)
        return Mutant(text, ".pbtxt", hows, False, dict(seed.feeds), list(seed.fetches), seed.grad)
    gd = graph_pb2.GraphDef()
    gd.CopyFrom(seed.graph_def)
    preserving = roll < 0.40
    hows = []
    for _ in range(rng.choice([1, 1, 1, 2, 3]) if not preserving else rng.choice([1, 2])):
        pool = PRESERVING if preserving else STRUCTURAL
        for _attempt in range(8):
            mutator = rng.choice(pool)
            try:
                how = mutator(rng, gd, seed, dtypes) if mutator is insert_identity else mutator(rng, gd, seed)
            except (ValueError, TypeError, OverflowError):   # a value protobuf cannot hold: try another
                how = None
            if how is not None:
                hows.append(how)
                break
    if not hows:
        hows.append("unchanged")
    text = rng.random() < 0.3
    data = _serialize(gd, text)
    if data is None:
        text = not text
        data = _serialize(gd, text)
    if data is None:   # nested beyond what protobuf can write either way
        return Mutant(seed.binary, ".pb", hows + ["(not serializable: the seed instead)"], True, dict(seed.feeds),
                      list(seed.fetches), seed.grad)
    return Mutant(data, ".pbtxt" if text else ".pb", hows, preserving, dict(seed.feeds), list(seed.fetches),
                  seed.grad)


def _serialize(gd: graph_pb2.GraphDef, text: bool) -> bytes | None:
    try:
        return text_format.MessageToString(gd).encode() if text else gd.SerializeToString()
    except (RecursionError, Exception):
        return None


__all__ = ["Mutant", "make_mutant", "mutate_bytes", "mutate_text", "function_pb2"]
