"""Command-line support: ``gradreg grad GRAPH ... --feed batch.npz --dask SCHEDULER|local:N --split x:0,y:0``.

The command line owns its parser; this module adds the options and does the distributed
evaluation, so the wiring in ``gradreg/cli.py`` is (tried against the current cli.py)::

    # build_parser(), with the grad subparser's other arguments:
    from gradreg.distributed import add_dask_arguments
    add_dask_arguments(p)

    # cmd_grad(), before the single-process evaluation (which becomes the elif):
    if args.dask is not None:
        from gradreg.distributed import run_distributed_grad
        y_values, x_grads = run_distributed_grad(args, graph, _read_feeds(args.feed))
        values = {**y_values, **{g.name: x_grads[x.name] for x, g in zip(xs, grads) if g is not None}}

``--dask local:N`` starts N worker processes on this machine for the command's duration;
any other value is the address of a running scheduler (``tcp://host:8786``).
"""
from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from gradreg.distributed.sharding import parse_split_entry, tensor_name
from gradreg.errors import FeedError, GradregError


def dask_target(text: str) -> str | int:
    """``local:N`` -> N (an int); a scheduler address -> itself. argparse type for ``--dask``."""
    if text.startswith("local:"):
        count = text[len("local:"):]
        if not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: expected local:N with N >= 1 worker processes")
        return int(count)
    if "://" not in text and ":" not in text:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a scheduler address (tcp://host:8786) or local:N")
    return text


def split_list(text: str) -> list[str]:
    """``"x:0,y:0=1"`` -> ["x:0", "y:0=1"], each checked. argparse type for ``--split``."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    try:
        for entry in entries:
            parse_split_entry(entry)
    except FeedError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not entries:
        raise argparse.ArgumentTypeError("--split needs at least one feed name")
    return entries


def add_dask_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--dask``, ``--split``, ``--reduction``, ``--shards`` and ``--no-relax-batch`` to a ``grad`` subparser."""
    group = parser.add_argument_group("data-parallel evaluation on a Dask cluster (pip install 'gradreg[dask]')")
    group.add_argument("--dask", metavar="SCHEDULER|local:N", type=dask_target, default=None,
                       help="evaluate the ys and gradients of the --feed batch data-parallel: on the scheduler at "
                            "this address, or on N local worker processes")
    group.add_argument("--split", metavar="NAMES", type=split_list, default=None,
                       help="feeds to split along their batch axis, comma-separated NAME or NAME=AXIS "
                            "(default: every feed, axis 0); the others go whole to every shard")
    group.add_argument("--reduction", choices=["mean", "sum"], default="mean",
                       help="how the ys reduce over the batch: mean (shards weighted by size) or sum")
    group.add_argument("--shards", type=int, default=None, metavar="N",
                       help="number of shards (default: one per worker)")
    group.add_argument("--no-relax-batch", dest="relax_batch", action="store_false",
                       help="keep a batch size the graph fixes: each shard must then hold exactly that many "
                            "examples (by default the split feeds' batch dimension is freed)")


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """The process's environment as it was, once the block ends: Dask's nannies set their workers'
    variables (OMP_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_, ...) in the process that starts them, and
    would leave every later BLAS and gradreg call of the caller's on one thread."""
    kept = dict(os.environ)
    try:
        yield
    finally:
        for name in [name for name in os.environ if name not in kept]:
            del os.environ[name]
        os.environ.update(kept)


@contextlib.contextmanager
def connect(target: str | int) -> Iterator[Any]:
    """A dask Client for ``target``: a scheduler address, or an int N for a local cluster of N processes."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise GradregError("--dask needs Dask: pip install 'gradreg[dask]'") from None
    if isinstance(target, int):
        with _environment_kept(), LocalCluster(n_workers=target, threads_per_worker=1, processes=True,
                                               dashboard_address=":0") as cluster, Client(cluster) as client:
            yield client
        return
    try:
        client = Client(target, timeout="20s")
    except (OSError, TimeoutError) as exc:
        raise GradregError(f"cannot reach the Dask scheduler at {target}: {exc}") from None
    with client:
        yield client


def run_distributed_grad(args: argparse.Namespace, graph: Any, feeds: Mapping[str, np.ndarray]
                         ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Evaluate ``args.ys`` and their gradients by ``args.xs`` on the cluster ``args.dask``.

    ``graph``: the loaded graph (gradient nodes the command added to it are shipped too and
    ignored). ``feeds``: the --feed values, keyed by tensor name. Returns ``(ys, grads)``:
    each y's value and each x's gradient (None if not connected), keyed by tensor name.
    """
    try:
        # Here, not at the top: data_parallel needs Dask, an optional extra, and the parser must
        # build without it.
        from gradreg.distributed.data_parallel import DataParallel
    except ImportError as exc:
        raise GradregError(f"--dask needs Dask: pip install 'gradreg[dask]' ({exc})") from None
    if not feeds:
        raise FeedError("--dask evaluates the gradients of a batch: give the batch with --feed")
    ys = [tensor_name(n) for n in args.ys.split(",") if n.strip()]
    xs = [tensor_name(n) for n in args.xs.split(",") if n.strip()]
    options = dict(split=args.split, reduction=args.reduction, shards=args.shards,
                   relax_batch=getattr(args, "relax_batch", True),
                   grad_ys=_names(getattr(args, "grad_ys", None)), stop_gradients=_names(getattr(args, "stop", None)),
                   unconnected_gradients=getattr(args, "unconnected", "none"),
                   custom_gradient=getattr(args, "custom_gradient", "error"), backend=getattr(args, "backend", None))
    with connect(args.dask) as client, DataParallel(graph, loss=ys, xs=xs, client=client, **options) as dp:
        y_values, grads = dp.loss_and_gradients(feeds)
    return dict(zip(ys, y_values)), dict(zip(xs, grads))


def _names(text: str | None) -> list[str] | None:
    return [n.strip() for n in text.split(",") if n.strip()] if text else None
