"""Nested structures of values — loop variables, branch results, function arguments and
outputs — as TensorFlow's ``tf.nest`` sees them, through optree.

Containers are lists, tuples, namedtuples, dicts, OrderedDicts and defaultdicts; everything
else (a Tensor, an array, a number, a string, an IndexedSlices) is a leaf, and so is None, as in
``tf.nest``. A dict's leaves come in the sorted order of its keys, as in TensorFlow; an
OrderedDict's in its own order (TensorFlow sorts those too: the structure rebuilt is the same
OrderedDict either way, only the order in which nodes are created differs).

    >>> from gradreg import nest
    >>> nest.flatten({"b": 1, "a": (2, None)})
    [2, None, 1]
    >>> nest.pack_sequence_as({"b": 0, "a": (0, 0)}, [10, 20, 30])
    {'a': (10, 20), 'b': 30}

Structures that differ raise :class:`~gradreg.errors.StructureError` (also a ValueError, as
``tf.nest`` raises).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Hashable, Iterable
from types import ModuleType
from typing import Any

from gradreg.errors import StructureError

# None is a leaf, as in tf.nest (optree's default makes it an empty container).
_OPTIONS: dict[str, Any] = {"none_is_leaf": True}


_tree: ModuleType | None = None


def _optree() -> ModuleType:
    """optree, imported on first use: every process that loads the plugins imports this module,
    and many (`gradreg inspect`) never nest anything."""
    global _tree
    if _tree is None:
        _tree = importlib.import_module("optree")
    return _tree


def flatten(structure: Any) -> list[Any]:
    """The leaves of ``structure``, in TensorFlow's order (a lone leaf gives ``[leaf]``)."""
    leaves: list[Any] = _optree().tree_leaves(structure, **_OPTIONS)
    return leaves


def structure_key(structure: Any) -> Hashable:
    """A hashable value equal for two structures exactly when they nest alike (container types,
    dict keys and namedtuple types included): a cache key for traced functions."""
    spec: Hashable = _optree().tree_structure(structure, **_OPTIONS)
    return spec


def is_nested(value: Any) -> bool:
    """Whether ``value`` is a container (a list, tuple, dict, ...), not a leaf."""
    return not _optree().tree_is_leaf(value, **_OPTIONS)


def pack_sequence_as(structure: Any, flat_sequence: Iterable[Any]) -> Any:
    """``structure`` rebuilt with the values of ``flat_sequence`` as its leaves, in order."""
    flat = list(flat_sequence)
    spec = _optree().tree_structure(structure, **_OPTIONS)
    if spec.num_leaves != len(flat):
        raise StructureError(f"cannot pack {len(flat)} values into a structure with {spec.num_leaves} leaves: "
                             f"{_describe(structure)}")
    return _optree().tree_unflatten(spec, flat)


def assert_same_structure(first: Any, second: Any, check_types: bool = True, what: str = "the structures") -> None:
    """StructureError (naming ``what``) unless ``first`` and ``second`` nest the same way. With
    ``check_types=False`` a list matches a tuple and a dict any mapping with the same keys."""
    a, b = (_optree().tree_structure(s, **_OPTIONS) for s in (first, second))
    if check_types:
        same = a == b
    else:
        same = _loose(first) == _loose(second)
    if not same:
        raise StructureError(f"{what} differ: {_describe(first)} and {_describe(second)}")


def map_structure(fn: Callable[..., Any], *structures: Any, check_types: bool = True) -> Any:
    """``fn`` applied to the leaves at the same place in each of ``structures`` (which must nest
    alike), in the structure of the first."""
    if not structures:
        raise StructureError("map_structure needs at least one structure")
    for other in structures[1:]:
        assert_same_structure(structures[0], other, check_types)
    flat = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [fn(*leaves) for leaves in zip(*flat)])


def flatten_up_to(shallow: Any, deep: Any, what: str = "the structures") -> list[Any]:
    """The parts of ``deep`` at the leaves of ``shallow`` (which ``deep`` must nest like down to
    those leaves): ``flatten_up_to([x, y], [[None, 3], [2]])`` is ``[[None, 3], [2]]``."""
    spec = _optree().tree_structure(shallow, **_OPTIONS)
    try:
        parts: list[Any] = spec.flatten_up_to(deep)
    except (ValueError, TypeError):
        raise StructureError(f"{what} differ: {_describe(shallow)} and {_describe(deep)}") from None
    return parts


def _loose(structure: Any) -> Any:
    """The nesting of ``structure`` with container types forgotten: sequences as tuples, mappings
    as their (key, nesting) pairs in sorted key order (for check_types=False)."""
    if not is_nested(structure):
        return None
    one_level = _optree().tree_flatten_one_level(structure, **_OPTIONS)
    parts = [_loose(child) for child in one_level.children]
    if isinstance(structure, dict):
        return ("mapping", tuple(sorted(zip(map(repr, one_level.entries), parts))))
    return ("sequence", tuple(parts))


def _describe(structure: Any) -> str:
    """A structure with its leaves drawn as ``*`` (``{'a': (*, *), 'b': *}``)."""
    spec = _optree().tree_structure(structure, **_OPTIONS)
    text = str(spec)
    return text[len("PyTreeSpec("):-1].replace(", NoneIsLeaf", "") if text.startswith("PyTreeSpec(") else text
