"""Splitting a batch of feeds into shards, and how each shard's result is weighted.

``split`` names the feeds cut along their batch axis; every other feed goes whole to every
shard. With ``reduction="mean"`` (the loss averages over the batch, as ``reduce_mean`` of a
per-example loss does) shard *i* of *n_i* of the *N* examples is weighted ``n_i / N``, so the
weighted sum of the shards' gradients is the full-batch gradient however unevenly the batch
divides. With ``reduction="sum"`` (the loss sums over the batch) the weights are 1 and the
shards' gradients are simply added. A term of the loss that does not depend on the batch
(a weight penalty) is right under "mean" (the weights sum to 1) and counted once per shard
under "sum".
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gradreg.errors import FeedError, GradregError

if TYPE_CHECKING:
    from gradreg.distributed.data import Rows

REDUCTIONS = ("mean", "sum")


@dataclass
class Shard:
    """One shard: the split feeds' slices (or the rows of data the workers hold, with the feeds
    not split), its number of examples and its weight."""
    feeds: dict[str, np.ndarray] | Rows
    size: int
    weight: float


def tensor_name(key: Any) -> str:
    """``"x"`` -> ``"x:0"``; a Tensor -> its name; ``"x:1"`` unchanged."""
    name = getattr(key, "name", key)
    if not isinstance(name, str):
        raise FeedError(f"feed key {key!r}: expected a tensor name or a Tensor")
    return name if ":" in name else f"{name}:0"


def parse_split_entry(entry: str) -> tuple[str, int]:
    """``"x:0"`` -> ("x:0", 0); ``"x:0=1"`` -> ("x:0", 1): a feed name and its batch axis."""
    name, _, axis = entry.strip().partition("=")
    if not name:
        raise FeedError(f"split entry {entry!r}: expected NAME or NAME=AXIS")
    try:
        return tensor_name(name), int(axis) if axis else 0
    except ValueError:
        raise FeedError(f"split entry {entry!r}: the axis after '=' must be an integer") from None


def split_axes(split: Sequence[str] | Mapping[str, int] | None, feeds: Mapping[str, Any]) -> dict[str, int]:
    """The batch axis of every feed to split (``None``: every feed, along axis 0)."""
    if split is None:
        return {name: 0 for name in feeds}
    if isinstance(split, str):
        split = [split]
    pairs = ([(tensor_name(k), int(v)) for k, v in split.items()] if isinstance(split, Mapping)
             else [parse_split_entry(getattr(e, "name", e)) for e in split])
    axes = dict(pairs)
    for name in axes:
        if name not in feeds:
            raise FeedError(f"split names '{name}', which is not among the feeds ({', '.join(feeds) or 'none'})")
    return axes


def batch_size(feeds: Mapping[str, np.ndarray], axes: Mapping[str, int]) -> int:
    """The common length of the split feeds along their batch axes (FeedError if they differ)."""
    sizes = {}
    for name, axis in axes.items():
        value = feeds[name]
        if not -value.ndim <= axis < value.ndim:
            raise FeedError(f"feed '{name}' of shape {list(value.shape)} has no axis {axis} to split along")
        sizes[name] = value.shape[axis]
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"'{n}': {s}" for n, s in sizes.items())
        raise FeedError(f"the split feeds disagree on the batch size ({listed})")
    size = next(iter(sizes.values()), 0)
    if size == 0:
        raise FeedError("the batch to split is empty (or no feed is split)")
    return size


def split_feeds(feeds: Mapping[str, Any], split, shards: int, reduction: str
                ) -> tuple[dict[str, np.ndarray], list[Shard]]:
    """The feeds every shard gets whole, and the shards (at most one per example).

    Shards differ in size by at most one example; see the module docstring for the weights.
    """
    if reduction not in REDUCTIONS:
        raise GradregError(f"reduction {reduction!r}: use 'mean' (the loss averages over the batch) or 'sum'")
    feeds = {tensor_name(k): np.asarray(v) for k, v in feeds.items()}
    axes = split_axes(split, feeds)
    total = batch_size(feeds, axes)
    common = {name: value for name, value in feeds.items() if name not in axes}
    count = max(1, min(shards, total))
    bounds = np.linspace(0, total, count + 1).round().astype(int)   # sizes differ by at most one
    out = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        part = {name: _slice(feeds[name], axis, start, stop) for name, axis in axes.items()}
        size = int(stop - start)
        out.append(Shard(part, size, size / total if reduction == "mean" else 1.0))
    return common, out


def _slice(value: np.ndarray, axis: int, start: int, stop: int) -> np.ndarray:
    """A view of ``value[start:stop]`` along ``axis`` (it is copied once, when Dask serializes it)."""
    index = [slice(None)] * value.ndim
    index[axis] = slice(int(start), int(stop))
    return value[tuple(index)]


def tree_levels(count: int) -> int:
    """The depth of the pairwise reduction of ``count`` shard results: ceil(log2(count))."""
    return max(0, int(count - 1).bit_length())
