"""Training data resident on the workers: each step then sends row numbers, not arrays.

    data = dp.scatter({"x:0": x_train, "labels:0": y_train})     # every worker gets the arrays once
    dp.train(optimizer, data.batches(128, shuffle=True, seed=0), steps=1000)

:meth:`DataParallel.scatter <gradreg.distributed.DataParallel.scatter>` registers the arrays
on the cluster in a :class:`DataPlugin` (a Dask WorkerPlugin, as the graph is): the scheduler
keeps it and installs it on every worker, one that joins or restarts later too, so a lost
worker loses no data. The driver keeps only the arrays' shapes and dtypes. A batch of
:meth:`ResidentData.batches` is a :class:`ResidentBatch`: which rows (a slice, or the row
numbers of a shuffled batch) and the feeds that are not split; a shard carries its part of
those rows as :class:`Rows`, and the worker takes them from its own copy of the arrays.

Every worker holds all the rows (a shard may run on any worker, and with one shard every
worker runs the whole batch): this is for data that fits in each worker's memory, once more
in the scheduler's. Bigger data goes in batches through ``train(dataset=...)`` as before.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import WorkerPlugin, get_worker

from gradreg.errors import FeedError, GradregError


@dataclass(frozen=True)
class Rows:
    """A shard's feeds as rows of arrays the workers hold (:class:`DataPlugin` ``data``), plus the
    feeds every shard gets whole. Small: this is what travels with a step instead of the arrays."""
    data: str
    index: slice | np.ndarray
    common: Mapping[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """How many rows (a slice's bounds are set: :meth:`ResidentBatch.split` makes them)."""
        return self.index.stop - self.index.start if isinstance(self.index, slice) else len(self.index)

    def feeds(self, worker: Any = None) -> dict[str, Any]:
        """The shard's feeds, taken from this worker's copy of the arrays (a slice is a view)."""
        worker = worker if worker is not None else get_worker()
        plugin = worker.plugins.get(self.data)
        if not isinstance(plugin, DataPlugin):
            raise GradregError(f"worker {worker.address} holds no data '{self.data}' (was it dropped?)")
        return {**{name: array[self.index] for name, array in plugin.arrays.items()}, **self.common}


def resolve(feeds: Mapping[str, Any] | Rows, worker: Any = None) -> dict[str, Any]:
    """A task's feeds: as sent, or taken from the rows the worker holds."""
    return feeds.feeds(worker) if isinstance(feeds, Rows) else dict(feeds)


@dataclass(frozen=True)
class ResidentBatch:
    """One batch of a :class:`ResidentData`: its rows and the feeds that are not split."""
    data: str
    index: slice | np.ndarray
    size: int
    common: Mapping[str, Any] = field(default_factory=dict)

    def with_feeds(self, feeds: Mapping[str, Any]) -> ResidentBatch:
        """The same rows, with more feeds every shard gets whole (a learning rate, a training flag)."""
        return ResidentBatch(self.data, self.index, self.size, {**self.common, **feeds})

    def split(self, shards: int, reduction: str) -> list[tuple[Rows, int, float]]:
        """``(rows, size, weight)`` of each shard, as :func:`.sharding.split_feeds` cuts a batch."""
        count = max(1, min(shards, self.size))
        bounds = np.linspace(0, self.size, count + 1).round().astype(int)
        out = []
        for start, stop in zip(bounds[:-1], bounds[1:]):
            if isinstance(self.index, slice):
                first = self.index.start or 0
                part: slice | np.ndarray = slice(first + int(start), first + int(stop))
            else:
                part = self.index[start:stop]
            size = int(stop - start)
            out.append((Rows(self.data, part, self.common), size, size / self.size if reduction == "mean" else 1.0))
        return out


class ResidentData:
    """Arrays registered on every worker of a cluster (see the module docstring); ``name`` is
    their plugin's name, ``shapes`` and ``dtypes`` those of each feed."""

    def __init__(self, client: Any, arrays: Mapping[str, Any]):
        if not arrays:
            raise FeedError("scatter: no arrays given")
        values = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
        lengths = {name: value.shape[0] if value.ndim else -1 for name, value in values.items()}
        if -1 in lengths.values() or len(set(lengths.values())) != 1:
            listed = ", ".join(f"'{n}': {v.shape}" for n, v in values.items())
            raise FeedError(f"scatter: the arrays must share their first axis, the examples ({listed})")
        if any(v.dtype == object for v in values.values()):
            raise FeedError("scatter: object arrays cannot be sent to the workers")
        self.rows = int(next(iter(lengths.values())))
        if self.rows == 0:
            raise FeedError("scatter: the arrays hold no example")
        self.shapes = {name: value.shape for name, value in values.items()}
        self.dtypes = {name: value.dtype for name, value in values.items()}
        self.name = f"gradreg-data-{uuid.uuid4().hex}"
        self.client = client
        client.register_plugin(DataPlugin(self.name, values), name=self.name)
        self.closed = False

    def __len__(self) -> int:
        return self.rows

    def batch(self, index: slice | np.ndarray | range, **feeds: Any) -> ResidentBatch:
        """The batch of the rows ``index`` (a slice, a range or row numbers)."""
        if isinstance(index, range):
            index = slice(index.start, index.stop, index.step)
        if isinstance(index, slice):
            start, stop, step = index.indices(self.rows)
            if step != 1:
                index = np.arange(start, stop, step)
            else:
                index, size = slice(start, stop), max(0, stop - start)
        if not isinstance(index, slice):
            index = np.asarray(index)
            if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
                raise FeedError(f"a batch's rows are a slice or a 1-D array of row numbers, not {index.dtype} "
                                f"of shape {list(index.shape)}")
            if index.size and (index.min() < -self.rows or index.max() >= self.rows):
                raise FeedError(f"row numbers out of range for data of {self.rows} examples")
            size = len(index)
        if size == 0:
            raise FeedError("the batch to split is empty")
        return ResidentBatch(self.name, index, size, dict(feeds))

    def batches(self, batch_size: int, *, shuffle: bool = False, seed: int | None = None,
                epochs: int | None = None, drop_remainder: bool = True) -> Iterator[ResidentBatch]:
        """Batches of ``batch_size`` rows, epoch after epoch (``epochs``: how many; None: no end).
        ``shuffle``: each epoch in a new order drawn from ``seed`` (the same seed, the same order);
        otherwise in order, each batch a slice. ``drop_remainder``: leave out an epoch's last,
        smaller batch (a graph with a fixed batch size needs this)."""
        if batch_size < 1:
            raise FeedError(f"batch_size={batch_size}: a batch holds at least one example")
        if batch_size > self.rows and drop_remainder:
            raise FeedError(f"batch_size={batch_size} is more than the {self.rows} examples of the data")
        rng = np.random.default_rng(seed)
        epoch = 0
        while epochs is None or epoch < epochs:
            order = rng.permutation(self.rows) if shuffle else None
            for start in range(0, self.rows, batch_size):
                stop = min(start + batch_size, self.rows)
                if stop - start < batch_size and drop_remainder:
                    break
                yield self.batch(order[start:stop] if order is not None else slice(start, stop))
            epoch += 1

    def take(self, batch: ResidentBatch, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The feeds of ``batch`` from ``arrays`` (the caller's copy of the data): the same rows in
        one process as the workers take."""
        return {**{name: np.asarray(arrays[name])[batch.index] for name in self.shapes}, **batch.common}

    def close(self) -> None:
        """Remove the arrays from the workers (and the scheduler)."""
        if not self.closed:
            self.closed = True
            self.client.unregister_worker_plugin(self.name)


class DataPlugin(WorkerPlugin):
    """Arrays on every worker (see the module docstring); it travels with its arrays only."""
    idempotent = True

    def __init__(self, name: str, arrays: Mapping[str, np.ndarray]):
        self.name = name
        self.arrays = dict(arrays)

    def __getstate__(self):
        return {"name": self.name, "arrays": self.arrays}

    def __setstate__(self, state):
        self.__init__(state["name"], state["arrays"])

    def teardown(self, worker) -> None:
        self.arrays = {}
