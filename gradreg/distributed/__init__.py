"""gradreg on Dask: data-parallel gradients and training of a serialized graph.

Install with ``pip install "gradreg[dask]"`` (dask.distributed and tqdm). The pieces:

* :class:`DataParallel` (:mod:`.data_parallel`): ships the GraphDef bytes to the workers once,
  splits batches into shards, sums the shards' gradients on the workers and trains with the
  v1 optimizers, variables on the driver;
* :mod:`.worker`: what runs on a worker: the graph bytes arrive in a worker plugin, which
  keeps a :class:`gradreg.Session` per graph;
* :mod:`.data`: training data scattered to the workers once (``DataParallel.scatter``), so a
  step sends row numbers instead of arrays;
* :mod:`.sharding`: how a batch is split and each shard weighted (``reduction="mean"|"sum"``);
* :mod:`.cli`: ``gradreg grad ... --dask SCHEDULER|local:N --split x:0,y:0``.
"""
from __future__ import annotations

import importlib
from typing import Any

# The command-line helpers work without Dask installed (the parser must build anyway);
# everything else imports distributed and loads on first use.
from gradreg.distributed.cli import add_dask_arguments, connect, run_distributed_grad
from gradreg.distributed.sharding import split_feeds

_LAZY = {"DataParallel": "data_parallel", "graph_bytes": "data_parallel", "ClusterError": "errors",
         "ResidentData": "data", "ResidentBatch": "data",
         "GradientSpec": "worker", "GraphPlugin": "worker",
         "BatchPinnedError": "graphs", "free_batch": "graphs", "thaw_constants": "graphs"}

__all__ = ["BatchPinnedError", "DataParallel", "ClusterError", "GradientSpec", "GraphPlugin", "ResidentBatch",
           "ResidentData", "add_dask_arguments",
           "free_batch", "thaw_constants",
           "connect", "graph_bytes", "run_distributed_grad", "split_feeds"]


def require_dask() -> None:
    """ImportError naming the extra to install when dask.distributed is missing."""
    try:
        importlib.import_module("distributed")
    except ImportError as exc:
        raise ImportError(f"gradreg.distributed needs Dask: pip install 'gradreg[dask]' ({exc})") from None


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'gradreg.distributed' has no attribute '{name}'")
    require_dask()
    value = getattr(importlib.import_module(f"gradreg.distributed.{_LAZY[name]}"), name)
    globals()[name] = value
    return value
