"""Synchronous data-parallel training: every worker computes a shard's gradients and applies the sum.

Each step (:meth:`DataParallel.train_step`) ships the batch's shards, sums their gradients
on the workers in shard order and has every worker apply the optimizer's update to its own
replica of the variables (the same update, from the same pickled optimizer, so the replicas
stay equal bit for bit). With the same graph, initial values, optimizer and batches, the
variables follow the single-process run (equal up to the rounding of the shards' sum).

Checkpoints are written on the driver every ``checkpoint_every`` steps: a worker's replica
is copied into the driver's Session and saved by :class:`gradreg.train.Saver` (model
variables, slots, global step; the names single-process training saves), so a run can be
resumed here, by a restarted driver (``resume=True``), or continued on one machine.
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import gradreg as gr
from gradreg.errors import GradregError


def global_step_value(dp) -> int:
    """The global step, 0 before any training (copied from a worker if training moved it)."""
    found = dp.graph.get_collection(gr.GraphKeys.GLOBAL_STEP)
    if not found or not dp.initialized:
        return 0
    dp.pull()
    return int(dp.session.run(found[0]))


def _prepare_variables(dp, update, checkpoint_dir: str | None) -> None:
    latest = gr.train.latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
    if latest:
        dp.restore(latest)
        update.initialized = True
        return
    if not dp.initialized:
        dp.initialize()
    if not update.initialized:
        if update.initialize_created is not None:
            dp.session.run(update.initialize_created)
            dp.lineage = None     # the workers need the new slots' values too
        update.initialized = True


def _progress_bar(steps: int, start: int):
    try:
        from tqdm import tqdm
    except ImportError:
        raise GradregError("progress=True needs tqdm: pip install 'gradreg[dask]' (or progress=False)") from None
    return tqdm(total=steps, unit="step", desc=f"training from step {start}")


def train(dp, optimizer, dataset: Iterable[Mapping[Any, Any]], steps: int, *, split=None,
          checkpoint_dir: str | None = None, checkpoint_every: int | None = None, resume: bool = False,
          progress: bool = True, callback: Callable[[int, float], Any] | None = None,
          max_to_keep: int = 5, window: int = 2, steps_per_task: int | None = None) -> list[float]:
    """Train ``dp``'s xs (variables) with a v1 ``optimizer`` for up to ``steps`` batches of ``dataset``.

    ``optimizer``: a v1 optimizer not yet used in a graph (it is pickled to the workers; pass
    the same object again to continue with its slots). ``dataset``: an iterable of feed dicts,
    one per step (training stops early when it ends). ``split``: as for
    :meth:`DataParallel.gradients`. ``checkpoint_dir``: where a Saver writes
    ``model-<step>.npz`` every ``checkpoint_every`` steps and at the end; with ``resume`` the
    newest checkpoint there is restored first (the caller skips the batches already seen,
    see ``dp.global_step``). ``callback(step, loss)`` runs after each update. ``window``: how
    many tasks are sent ahead of the one the driver waits for (0: one at a time).
    ``steps_per_task``: with one shard, how many consecutive steps one task runs (their
    callbacks and progress then come together, when the task returns); None: as many as
    take about 0.1 s on the workers (one per task for steps that long). ``dataset`` may
    also yield the batches of data scattered to the workers (``dp.scatter(...).batches(...)``,
    :mod:`gradreg.distributed.data`): a step then sends row numbers, not arrays. Returns the
    loss of every step. Afterwards ``dp.session`` holds the trained values.

        losses = dp.train(gradreg.train.AdamOptimizer(0.003), batches, steps=500, checkpoint_dir="runs/dp")
    """
    update = dp.update_for(optimizer)
    _prepare_variables(dp, update, checkpoint_dir if resume else None)
    saver = gr.train.Saver(max_to_keep=max_to_keep)
    step = global_step_value(dp)
    bar = _progress_bar(steps, step) if progress else None
    losses: list[float] = []
    saved: list[str] = []
    done = [step]

    def on_step(ys: list) -> None:
        losses.append(float(sum(ys)))
        done[0] += 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(step=done[0], loss=f"{losses[-1]:.4f}")
        if checkpoint_dir and checkpoint_every and done[0] % checkpoint_every == 0:
            dp.pull()        # the pipeline is drained at these steps: the replicas hold exactly this step
            saved.append(saver.save(dp.session, os.path.join(checkpoint_dir, "model"), global_step=done[0]))
        if callback is not None:
            callback(done[0], losses[-1])

    drain = checkpoint_every if checkpoint_dir and checkpoint_every else None
    try:
        dp.run_steps(update, itertools.islice(dataset, steps), split, window=window, on_step=on_step,
                     drain_every=drain, counted_from=step, steps_per_task=steps_per_task)
    finally:
        if bar is not None:
            bar.close()
    step = done[0]
    saved_at = saved[-1] if saved else None
    dp.pull()
    if checkpoint_dir and losses and saved_at != _checkpoint_path(checkpoint_dir, step):
        saver.save(dp.session, os.path.join(checkpoint_dir, "model"), global_step=step)
    return losses


def _checkpoint_path(directory: str, step: int) -> str:
    return f"{os.path.join(directory, 'model')}-{step}.npz"

