"""``gradreg grad --grad-ys``: the weights of the ys (the cotangents ``gradients`` starts from), for
every format. A weight is a value, as ``--feed`` takes them:

    --grad-ys loss=1.0                  # a scalar: every element of the y weighted by it
    --grad-ys output_0=onehot.npy       # an array broadcast to the y's shape (one class of a softmax)
    --grad-ys weights.npz               # one array per y, keyed by the y's name
    --grad-ys dy1,dy2                   # graph files: tensors of the graph, one per y in order

A y is named as on ``--ys`` (for a SavedModel its signature output name, for an ONNX file its
output name), or by its tensor's name. A y without a weight gets ones, as before.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gradreg.build.builders import apply_op, constant
from gradreg.cli_values import UsageError, feed_value, load_npz, names, tensor_name
from gradreg.errors import FeedError, GradregError
from gradreg.model.graph import Graph, Tensor

__all__ = ["parse_weights", "weight_arrays", "weight_tensors", "zero_gradients_note"]

# Unweighted gradients all below this (in absolute value) earn a note on how to weight the ys.
NEGLIGIBLE = 1e-6


def parse_weights(specs: Sequence[str] | None) -> tuple[dict[str, Any], list[str]]:
    """The ``--grad-ys`` options as (weights by y name: the text of a value or an array, tensor
    names). UsageError if both forms are given."""
    values: dict[str, Any] = {}
    tensors: list[str] = []
    for spec in specs or []:
        if "=" in spec:
            name, text = (part.strip() for part in spec.split("=", 1))
            if not name or not text:
                raise UsageError(f"--grad-ys {spec!r}: expected NAME=VALUE, NAME=FILE.npy, FILE.npz or tensor names")
            values[name] = text
        elif spec.lower().endswith(".npz"):
            values.update(load_npz(spec))
        else:
            tensors += names(spec)
    if values and tensors:
        raise UsageError("--grad-ys takes weights (NAME=VALUE, NAME=FILE.npy, FILE.npz) or tensor names, not both")
    return values, tensors


def weight_tensors(graph: Graph, ys: Sequence[Tensor], labels: Sequence[Sequence[str]],
                   values: Mapping[str, Any]) -> list[Tensor | None]:
    """One weight per y (None: ones) from ``values`` keyed by a y's label (``labels[i]``: the
    names y i answers to), built in ``graph`` under the scope ``grad_ys``: a Const of the y's
    dtype, broadcast to the y's shape at run time when it is not the y's static shape."""
    out: list[Tensor | None] = [None] * len(ys)
    for key, value in values.items():
        index = _which_y(key, labels)
        y = ys[index]
        array = _array(key, value, y)
        _check_broadcast(key, array.shape, y)
        with graph.as_default(), graph.name_scope("grad_ys"):
            weight: Tensor = constant(array, y.known_dtype.base_dtype)
            if not (y.shape.is_fully_defined() and tuple(y.shape.as_list()) == array.shape):
                weight = apply_op("BroadcastTo", weight, apply_op("Shape", y))
        out[index] = weight
    return out


def weight_arrays(ys: Sequence[Tensor], y_names: Sequence[str], values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The weights as arrays of their y's dtype, keyed by the y's name in ``y_names`` (for writers
    that build the weights themselves: a SavedModel's gradient graph)."""
    labels = [[name] for name in y_names]
    out: dict[str, np.ndarray] = {}
    for key, value in values.items():
        index = _which_y(key, labels)
        array = _array(key, value, ys[index])
        _check_broadcast(key, array.shape, ys[index])
        out[y_names[index]] = array
    return out


def _which_y(key: str, labels: Sequence[Sequence[str]]) -> int:
    for i, names_of_y in enumerate(labels):
        if key in names_of_y or tensor_name(key) in names_of_y:
            return i
    known = ", ".join(repr(group[0]) for group in labels)
    raise UsageError(f"--grad-ys {key!r} names none of the ys ({known})")


def _array(key: str, value: Any, y: Tensor) -> np.ndarray:
    dtype = y.known_dtype.base_dtype
    if not (dtype.is_floating or dtype.is_complex):
        raise FeedError(f"--grad-ys {key!r}: y {y.name} is {dtype.name}; only floating-point ys have gradients")
    storage = dtype.storage
    try:
        return feed_value(value, storage) if isinstance(value, str) else np.asarray(value).astype(storage)
    except (TypeError, ValueError, GradregError) as exc:
        raise FeedError(f"--grad-ys {key!r}: {exc}") from None


def _check_broadcast(key: str, shape: tuple[int, ...], y: Tensor) -> None:
    """The weight must broadcast to the y (NumPy's rules, towards the y only)."""
    static = y.shape
    if static.rank is None:
        return
    dims = static.as_list()
    fits = len(shape) <= len(dims) and all(
        w == 1 or d is None or w == d for w, d in zip(reversed(shape), reversed(dims)))
    if not fits:
        raise FeedError(f"--grad-ys {key!r}: a weight of shape {list(shape)} does not broadcast to y {y.name} "
                        f"of shape {static}")


def zero_gradients_note(gradients: Sequence[Any], y_names: Sequence[str]) -> str | None:
    """For unweighted ys: a note when every gradient value is (near) zero, which is what the sum of
    a softmax's probabilities gives (they sum to one); None otherwise."""
    arrays = [np.asarray(g) for g in gradients if g is not None]
    if not arrays or not y_names:
        return None
    for array in arrays:
        if array.dtype.kind not in "fc" or (array.size and np.abs(array).max() > NEGLIGIBLE):
            return None
    return (f"every gradient is zero (|g| <= {NEGLIGIBLE:g}): each y is summed unweighted, and a y whose elements "
            f"sum to a constant (softmax probabilities) has none; weight it, e.g. for one class: "
            f"--grad-ys {y_names[0]}=[0,1,0,...] or --grad-ys {y_names[0]}=FILE.npy")
