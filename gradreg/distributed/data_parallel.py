"""DataParallel: gradients and training of one serialized graph on a Dask cluster.

    from distributed import Client, LocalCluster
    from gradreg.distributed import DataParallel

    client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
    dp = DataParallel("model.pb", loss="loss:0", client=client)   # xs: the loss's trainable variables
    dp.initialize()                                                # or dp.restore(checkpoint)
    grads = dp.gradients({"x:0": x, "labels:0": y}, split=["x:0", "labels:0"])
    dp.train(gradreg.train.AdamOptimizer(0.003), batches, steps=1000, checkpoint_dir="runs/dp")

The GraphDef bytes go to every worker once, inside a worker plugin named for their SHA-256
(a batch size the graph fixes freed first, a frozen model's weight Consts thawed into
variables: :mod:`gradreg.distributed.graphs`); each worker loads them, builds the gradient
graph and compiles it once (see :mod:`gradreg.distributed.worker`).

Variables live on the workers. The driver sends its values (after ``initialize()`` or
``restore()``) to every worker once; each worker keeps a replica of the model, and a step
moves only the batch shards (one task each), the shards' gradients, summed pairwise on the
workers in shard order (ceil(log2(shards)) levels), and the sum, which every worker fetches
to apply the optimizer's update to its own replica. With one shard (one worker when the
DataParallel was made, or ``shards=1``) every worker runs the whole step on the batch, the
loss, gradients and update in one compiled plan as ``minimize`` in one process: the batch
in, the loss out, no gradient moved. ``gradients()`` returns the sum to the driver.

Each step expects the replicas in one state (a lineage and a step count): a worker that
died takes nothing with it that the others do not hold; Dask reruns its tasks elsewhere,
and a replica that missed an update, or a new worker, gets a copy of the newest one before
the step runs again (:meth:`DataParallel._recover`). The number of shards is fixed when the
DataParallel is made (default: one per worker then) and the reduction sums them in shard
order, so a step gives the same bits whichever workers run it: training that lost a worker
ends with the fault-free run's weights. If every worker holding the model is lost, the
driver's last checkpoint is the way on (``train(..., resume=True)``).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from dask.sizeof import sizeof
from distributed.comm.core import CommClosedError

import gradreg as gr
from gradreg.distributed.data import ResidentBatch, ResidentData, Rows
from gradreg.distributed.errors import ClusterError, ReplicaMismatch
from gradreg.distributed.graphs import PLACEHOLDERS, BatchReport, free_batch, static_batch, thaw_constants
from gradreg.distributed.sharding import REDUCTIONS, Shard, parse_split_entry, split_feeds, tensor_name, tree_levels
from gradreg.distributed.trainer import global_step_value, train
from gradreg.distributed.worker import (
    GradientSpec,
    GraphPlugin,
    OptimizerUpdate,
    State,
    StepRunner,
    add_pair,
    apply_update,
    export_state,
    import_state,
    replica_state,
    shard_gradients,
)
from gradreg.errors import ExecutionError, FeedError, GradregError
from gradreg.model.traversal import needed_ops

ACTOR_POLL = 0.5          # seconds between checks that the worker of a step runner call still lives
MEMBERSHIP_CHECK = 1.0    # seconds a look-up of the cluster's workers is trusted for
CALL_SECONDS = 0.1        # with one shard, what a call of a step runner should take (steps_per_task=None)
MAX_STEPS_PER_CALL = 64


@dataclass
class PendingSteps:
    """Consecutive training steps sent to the cluster: what to run them again from (each step's
    unsplit feeds and shards), the state they start from, and the futures of their tasks."""
    update: OptimizerUpdate
    steps: list[tuple[dict, list[Shard]]]
    state: State
    workers: list[str]
    futures: list
    direct: bool = False      # the futures are calls of StepRunner actors, not tasks


class DataParallel:
    """Data-parallel evaluation of the gradients of ``loss`` with respect to ``xs`` on ``client``'s cluster.

    ``graph_or_path``: a Graph, GraphDef bytes, or the path of a .pb/.pbtxt file.
    ``loss``: a scalar tensor name (or several, whose sum is differentiated, as gradients() does).
    ``xs``: tensor names or variable names (default: the trainable variables the loss reads); a
    frozen model's weight Consts become variables (see :func:`.graphs.thaw_constants`).
    ``split``: the feeds to cut along their batch axis (default: every feed, axis 0); a dict
    gives other axes. ``relax_batch``: free a batch size the graph fixes for the split feeds
    (see :func:`.graphs.free_batch`); with False each shard must hold exactly that many examples.
    ``reduction``: "mean" when the loss averages over the batch (shards are
    weighted by their share of it, so the result is the full-batch gradient), "sum" when it
    sums (shards are added). ``shards``: how many (default: the number of workers now).
    ``grad_ys``, ``stop_gradients``, ``unconnected_gradients``, ``custom_gradient``: as for
    :func:`gradreg.gradients`. ``backend``: the workers' Session backend. ``max_retries``: how often a step whose data a
    dying worker took along is run again before :class:`ClusterError`; ``worker_timeout``: how
    long to wait for a worker when the cluster has none (seconds).
    """

    def __init__(self, graph_or_path: Any, loss: str | Sequence[str] = "loss:0", xs: Sequence[Any] | None = None,
                 client: Any = None, *, split: Sequence[str] | Mapping[str, int] | None = None,
                 reduction: str = "mean", shards: int | None = None, backend: str | None = None,
                 relax_batch: bool = True, grad_ys: Sequence[str] | None = None,
                 stop_gradients: Sequence[str] | None = None, unconnected_gradients: str = "none",
                 custom_gradient: str = "error", max_retries: int = 3, worker_timeout: float = 60.0):
        from distributed import default_client
        if reduction not in REDUCTIONS:
            raise GradregError(f"reduction {reduction!r}: use 'mean' (the loss averages over the batch) or 'sum'")
        self.client = client if client is not None else default_client()
        self.worker_timeout = worker_timeout
        self.shards = shards if shards is not None else len(self._wait_for_a_worker())
        written = gr.load_graph(graph_bytes(graph_or_path))
        graph_def = written.as_graph_def()
        axes = declared_axes(written, split)
        self.relax_batch = relax_batch
        if self.relax_batch:
            graph_def, self.batch_report = free_batch(graph_def, axes)
        else:
            self.batch_report = BatchReport(batch=static_batch(written, axes))
        frozen = [name for name in _names(xs) if _is_const(written, name)]
        if frozen:
            graph_def = thaw_constants(graph_def, frozen)
            xs = [f"{name.split(':')[0]}/variable" if name in frozen else name for name in _names(xs)]
        self.graph_bytes = graph_def.SerializeToString(deterministic=True)
        self.digest = hashlib.sha256(self.graph_bytes).hexdigest()
        self.graph = gr.load_graph(self.graph_bytes)      # the driver's copy: checkpoints are written from it
        self.split, self.reduction, self.max_retries = split, reduction, max_retries
        self.graph_variables = {v.op.name: v for v in gr.train.find_variables(self.graph)}
        ys = [loss] if isinstance(loss, str) else list(loss)
        self.ys = [self._scalar_loss(tensor_name(y)) for y in ys]
        read = _ancestor_ops(self.ys)
        self.variables = [v for name, v in self.graph_variables.items() if v.op in read]
        self.xs = self._resolve_xs(xs)
        self.plugin_name = f"gradreg-graph-{self.digest}-{uuid.uuid4().hex[:8]}"
        self.spec = GradientSpec(
            plugin=self.plugin_name, digest=self.digest, ys=tuple(t.name for t in self.ys),
            xs=tuple(_x_name(x) for x in self.xs), variables=tuple(v.op.name for v in self.variables),
            grad_ys=tuple(tensor_name(n) for n in grad_ys) if grad_ys else None,
            stop_gradients=tuple(tensor_name(n) for n in stop_gradients or ()),
            unconnected_gradients=unconnected_gradients, custom_gradient=custom_gradient, backend=backend,
            batch_axes=tuple(sorted(axes.items())) if relax_batch else ())
        self.session = gr.Session(self.graph, backend=backend)
        thawed = [self.graph_variables[f"{n.split(':')[0]}/variable"] for n in frozen]
        if thawed:            # their values are the frozen graph's: no initialize() needed for them
            self.session.run([v.initializer for v in thawed])
        self.initialized = all(v in thawed for v in self.graph_variables.values())
        self.retries = 0                    # steps (and gradients) run again after a worker was lost
        self.last_step: dict[str, Any] = {}
        self.updates: dict[bytes, OptimizerUpdate] = {}   # the optimizers' updates, by pickled optimizer
        self.lineage: State | None = None   # the state every replica holds (None: push the driver's)
        self.driver_current = True          # the driver's Session holds the newest values
        self.known_workers: set[str] = set()
        self.runners: dict[str, tuple[Any, Any]] = {}   # worker -> (future, StepRunner actor)
        self.membership_checked = -MEMBERSHIP_CHECK      # when the scheduler last said who the workers are
        self.last_ys: list = []
        self.step_seconds = float("inf")    # the workers' last step time (with one shard; none yet: as long as can be)
        self.replica_losses: dict[int, list] = {}   # step -> loss values, as the replicas last reported
        self.client.register_plugin(GraphPlugin(self.plugin_name, self.graph_bytes), name=self.plugin_name)
        self.resident: dict[str, ResidentData] = {}     # data scattered to the workers, by plugin name
        self.closed = False

    # -- construction helpers ----------------------------------------------------------------
    def _scalar_loss(self, name: str):
        try:
            tensor = self.graph.get_tensor(name)
        except GradregError:
            raise GradregError(f"loss '{name}' names no tensor of the graph") from None
        if tensor.shape.rank not in (None, 0):
            raise GradregError(f"loss '{name}' has shape {tensor.shape}: data-parallel gradients need a scalar loss "
                               f"(reduce it with reduce_mean or reduce_sum)")
        return tensor

    def _resolve_xs(self, xs: Sequence[Any] | None) -> list:
        if xs is None:
            chosen = [v for v in self.variables if v.trainable]
            if not chosen:
                raise GradregError(f"the loss {', '.join(t.name for t in self.ys)} reads no trainable variable: "
                                   f"name the xs to differentiate by")
            return chosen
        out: list[Any] = []          # Variables and Tensors
        for x in xs:
            name = getattr(x, "name", x)
            if not isinstance(name, str):
                raise GradregError(f"xs: {x!r} is not a tensor or variable name")
            op_name = name[:-2] if name.endswith(":0") else name
            if op_name in self.graph_variables:   # a variable, or its handle "w:0": differentiate by the variable
                out.append(self.graph_variables[op_name])
                continue
            try:
                out.append(self.graph.get_tensor(tensor_name(name)))
            except GradregError:
                raise GradregError(f"xs: '{name}' names no tensor or variable of the graph") from None
        return out

    # -- variables: on the driver until pushed, then on every worker -----------------------------
    def initialize(self) -> None:
        """Run the initializers of the model's variables in the driver's Session."""
        missing = [name for name, v in self.graph_variables.items() if v.initializer is None]
        if missing:
            raise GradregError(f"variables without an initializer in the graph: {', '.join(missing)} "
                               f"(restore a checkpoint instead)")
        self.session.run([v.initializer for v in self.graph_variables.values()])
        self._driver_changed()

    def restore(self, path: str) -> None:
        """Restore the driver's variables (and the optimizers' slots built so far) from a checkpoint."""
        gr.train.Saver().restore(self.session, path)
        self._driver_changed()

    def _driver_changed(self) -> None:
        self.initialized = True
        self.driver_current = True
        self.lineage = None

    def variable_values(self) -> list[np.ndarray]:
        """The current values of the variables the loss reads (from a worker after training)."""
        if not self.variables:
            return []
        self.pull()
        try:
            return [np.asarray(v) for v in self.session.run(self.variables)]
        except ExecutionError as exc:
            raise ExecutionError(f"{exc}; call DataParallel.initialize() or .restore(checkpoint)",
                                 exc.node_name, exc.op_type) from None

    def update_for(self, optimizer: Any) -> OptimizerUpdate:
        """The driver's copy of ``optimizer``'s update (built once per optimizer); the workers build
        theirs from the same pickled optimizer."""
        try:
            blueprint = pickle.dumps(optimizer)
        except Exception as exc:   # an optimizer already used in a graph holds graph objects
            raise GradregError(f"DataParallel.train needs an optimizer not yet used in a graph "
                               f"(it is sent to the workers): {type(exc).__name__}: {exc}") from None
        update = self.updates.get(blueprint)
        if update is None:
            self.pull()
            update = self.updates[blueprint] = OptimizerUpdate(self.graph, self.graph_variables, self.xs, blueprint)
        return update

    def pull(self) -> None:
        """Copy a worker's replica into the driver's Session (before a checkpoint, or to read values)."""
        if self.driver_current:
            return
        for _ in range(self.max_retries + 1):
            try:
                self._recover()
                holder = next(w for w, s in self._states().items() if s and s["state"] == self.lineage)
                snapshot = self.client.run(export_state, self.spec, workers=[holder])[holder]
                break
            except _retryable():
                continue
        else:
            raise ClusterError("could not copy the model from a worker: workers kept leaving")
        variables = {v.op.name: v for v in gr.global_variables(self.graph)}
        for name, value in snapshot["values"].items():
            variables[name].load(value, self.session)
        self.driver_current = True

    def _snapshot(self) -> dict:
        """The driver's variables as a new lineage's first state."""
        variables = sorted(gr.global_variables(self.graph), key=lambda v: v.op.name)
        try:
            values = self.session.run(variables) if variables else []
        except ExecutionError as exc:
            raise ExecutionError(f"{exc}; call DataParallel.initialize() or .restore(checkpoint)",
                                 exc.node_name, exc.op_type) from None
        return {"state": (uuid.uuid4().hex[:12], 0), "updates": list(self.updates), "last": {},
                "values": {v.op.name: np.asarray(x) for v, x in zip(variables, values)}}

    def _push(self) -> None:
        """Send the driver's variables to every worker (once per lineage: after initialize, restore,
        or a new optimizer; steps then send none)."""
        snapshot = self._snapshot()
        workers = self._wait_for_a_worker()
        self.client.run(import_state, self.spec, snapshot, workers=workers)
        self.lineage, self.known_workers = snapshot["state"], set(workers)
        self.replica_losses = {}

    def _states(self) -> dict[str, dict | None]:
        """Each reachable worker's replica state (None: no replica, or none it can build). A worker
        the scheduler still lists but that cannot be reached (it just died) is left out."""
        states = self.client.run(replica_state, self.spec, on_error="return")
        return {w: s if isinstance(s, dict) else None for w, s in states.items() if not isinstance(s, OSError)}

    def _recover(self) -> None:
        """Bring every worker's replica to the newest state of this lineage (a worker that joined,
        or one that missed an update, gets a copy); ClusterError if no worker holds the model."""
        self._wait_for_a_worker()
        if self.lineage is None:
            self._push()
            return
        states = self._states()
        ours = {w: s for w, s in states.items() if s and s["state"] and s["state"][0] == self.lineage[0]}
        if not ours:
            if self.driver_current:
                self._push()
                return
            raise ClusterError("every worker holding the model was lost: train again with resume=True to continue "
                               "from the last checkpoint")
        source = max(ours, key=lambda w: ours[w]["state"][1])
        best = ours[source]
        behind = [w for w, s in states.items() if not s or s["state"] != best["state"]]
        if behind:
            snapshot = self.client.run(export_state, self.spec, workers=[source])[source]
            self.client.run(import_state, self.spec, snapshot, workers=behind)
        self.lineage, self.known_workers = best["state"], set(states)
        self.replica_losses = dict(best["last"])

    def _current(self) -> State:
        if self.lineage is None:
            raise ClusterError("the workers hold no copy of the model")
        return self.lineage

    def _ready(self) -> list[str]:
        """The workers, every one holding the current state (pushing or copying it first if needed).

        The scheduler is asked who the workers are at most every MEMBERSHIP_CHECK seconds (a
        round trip each time): a worker that joined gets its copy by then, and a worker that
        left shows sooner, in the step that needed it."""
        now = time.monotonic()
        if self.lineage is not None and self.known_workers and now - self.membership_checked < MEMBERSHIP_CHECK:
            return sorted(self.known_workers)
        workers = sorted(self.client.scheduler_info().get("workers", {})) or self._wait_for_a_worker()
        self.membership_checked = now
        if self.lineage is None or not set(workers) <= self.known_workers:
            self._recover()
            workers = sorted(self.known_workers)
        self.known_workers = set(workers)
        return workers

    # -- evaluation ----------------------------------------------------------------------------
    def gradients(self, feeds: Mapping[Any, Any], split: Sequence[str] | Mapping[str, int] | None = None) -> list:
        """The full-batch gradients of the loss with respect to the xs (one array, or None, per x)."""
        return self.loss_and_gradients(feeds, split)[1]

    def loss_and_gradients(self, feeds: Mapping[Any, Any], split=None) -> tuple[list, list]:
        """``(loss values, gradients)``; loss values are reduced like the gradients (mean or sum)."""
        common, shards = self._split(feeds, split)

        def once(attempt: int) -> tuple[list, list]:
            workers = self._ready()
            lineage, step = self._current()
            tag = f"{lineage}-{step}-g{uuid.uuid4().hex[:6]}"
            total = self._reduce(self._shard_futures(workers, common, shards, tag), tag).result()
            self._record(shards, workers, total)
            return total["ys"], total["grads"]
        return self._with_retries(once, None)

    def train_step(self, update: OptimizerUpdate, feeds: Mapping[Any, Any], split=None) -> list:
        """One synchronous step (see :meth:`run_steps`). Returns the step's loss values."""
        out: list = []
        self.run_steps(update, [feeds], split, window=0, on_step=lambda ys: out.append(ys))
        return out[0]

    def run_steps(self, update: OptimizerUpdate, batches: Iterable[Mapping[Any, Any]], split=None, *,
                  window: int = 2, on_step: Callable[[list], Any] | None = None,
                  drain_every: int | None = None, counted_from: int = 0, steps_per_task: int | None = None) -> int:
        """Train on each batch: every shard's gradients, summed on the workers in shard order, applied
        by every worker to its replica. ``window`` tasks are sent ahead of the one the driver waits
        for: a step's tasks that reach a worker before the update of the step before them wait
        there, outside the worker's thread pool (:meth:`.worker.Replica.wait_for`), so one step
        follows another without a round trip to the driver or the scheduler. With one shard a task
        runs up to ``steps_per_task`` consecutive steps (the batches travel together; the replica
        runs them one after the other), so a step's share of the round trip to the worker is that
        much smaller; None (the default) fills each call with about CALL_SECONDS of steps, by
        the workers' last step time (one step a call until a step is timed; at most
        MAX_STEPS_PER_CALL). ``on_step(ys)`` is called with each step's loss values, in order, as
        its task returns. At every multiple of ``drain_every`` (steps counted from
        ``counted_from``) the pipeline empties, so a checkpoint sees the state after exactly that
        step. Returns the number of steps run.
        """
        if steps_per_task is not None and steps_per_task < 1:
            raise GradregError(f"steps_per_task={steps_per_task}: a task runs at least one step")
        inflight: deque[PendingSteps] = deque()
        group: list[tuple[dict, list[Shard]]] = []
        count = 0
        for feeds in batches:
            common, shards = self._split(feeds, split)
            group.append((common, shards))
            count += 1
            drain = drain_every is not None and (counted_from + count) % drain_every == 0
            if drain or len(group) >= (self._steps_per_call(steps_per_task) if len(shards) == 1 else 1):
                inflight.append(self._submit(update, group, inflight[-1] if inflight else None))
                group = []
            while inflight and (len(inflight) > window or drain):
                self._finish(inflight, on_step)
        if group:
            inflight.append(self._submit(update, group, inflight[-1] if inflight else None))
        while inflight:
            self._finish(inflight, on_step)
        return count

    def _steps_per_call(self, chosen: int | None) -> int:
        """The steps one call of a step runner carries: ``chosen``, or as many as take about
        CALL_SECONDS by the workers' last step time (a call's round trip is then a small share of it)."""
        if chosen is not None:
            return chosen
        if not self.step_seconds > 0:
            return MAX_STEPS_PER_CALL
        return max(1, min(MAX_STEPS_PER_CALL, int(CALL_SECONDS / self.step_seconds)))

    def _submit(self, update: OptimizerUpdate, steps: list[tuple[dict, list[Shard]]], after: PendingSteps | None,
                attempt: int = 0) -> PendingSteps:
        """Send the tasks of consecutive steps (several only with one shard); ``after``: the steps
        before them, still in flight (None: none are)."""
        if after is None:
            workers = self._ready()
            state = self._current()
        else:
            workers, state = after.workers, (after.state[0], after.state[1] + len(after.steps))
        lineage, step = state
        tag = f"{lineage}-{step}-{attempt}"
        common, shards = steps[0]
        if len(shards) == 1:
            # One shard (fixed when the DataParallel was made): each replica runs the whole steps,
            # each one compiled plan as in one process, called straight from here (a Dask actor
            # per worker, no scheduler in between); no gradient moves.
            feeds = [_payload(c, s[0]) for c, s in steps]
            runners = self._runners(workers)
            futures = [runners[w].steps(update.blueprint, state, feeds) for w in workers]
            return PendingSteps(update, list(steps), state, workers, futures, direct=True)
        if len(steps) != 1:
            raise GradregError("a task of several shards runs one step")
        parts = [self.client.submit(shard_gradients, self.spec, state, _payload(common, shard), shard.weight,
                                    key=f"gradreg-shard-{tag}-{i}", pure=False,
                                    workers=[workers[i % len(workers)]], allow_other_workers=True)
                 for i, shard in enumerate(shards)]
        total = self._reduce(parts, tag)
        futures = [self.client.submit(apply_update, self.spec, update.blueprint, state, total,
                                      key=f"gradreg-apply-{tag}-{i}", pure=False, workers=[w],
                                      allow_other_workers=True) for i, w in enumerate(workers)]
        return PendingSteps(update, list(steps), state, workers, futures)

    def _finish(self, inflight: deque[PendingSteps], on_step: Callable[[list], Any] | None) -> None:
        """Wait for the oldest steps in flight; after a failure, recover and run them and the ones after them again."""
        pending = inflight[0]
        try:
            results = self._gather(pending)
        except _retryable() as exc:
            self._rerun(inflight, f"{type(exc).__name__}: {exc}", on_step)
            return
        done = [r for r in results if r["ys"] is not None]
        if not done:     # no replica was in the steps' state (every one that was has left)
            self._rerun(inflight, "no worker held the step's state", on_step)
            return
        inflight.popleft()
        self.step_seconds = max(r.get("step_seconds", 0.0) for r in done)
        lineage, step = pending.state
        for i, ys in enumerate(_losses(done[0])):
            self.lineage, self.driver_current = (lineage, step + i + 1), False
            self.last_ys = ys
            if on_step is not None:
                on_step(ys)
        self._record(pending.steps[-1][1], pending.workers, done[0])
        if {r["worker"] for r in results} != set(pending.workers) or any(r["status"] == "missing" for r in results):
            self._rerun(inflight, "", on_step)   # a worker left or joined: bring all level, go on one by one

    def _rerun(self, inflight: deque[PendingSteps], failure: str, on_step) -> None:
        """Drop the steps in flight, bring the replicas level, and run those not yet applied one by one."""
        groups = list(inflight)
        inflight.clear()
        for pending in groups:
            if not pending.direct:
                self.client.cancel(pending.futures)
        if any(p.direct for p in groups):
            self.runners.clear()      # made again for the workers there are after the recovery
        failures = [failure] if failure else []
        self._recover_quietly()
        for pending in groups:
            for i, one in enumerate(pending.steps):
                self._run_again(pending.update, one, (pending.state[0], pending.state[1] + i), failures)
                if on_step is not None:
                    on_step(self.last_ys)

    def _run_again(self, update: OptimizerUpdate, one: tuple[dict, list[Shard]], state: State,
                   failures: list[str]) -> None:
        """Run the step from ``state`` unless the replicas applied it already; ``self.last_ys``: its loss."""
        lineage, step = state
        while True:
            applied = self.replica_losses.get(step + 1) if self._current()[1] > step else None
            if applied is not None:            # applied by the replicas before the failure showed
                self.last_ys = applied
                return
            try:
                if self._current() != state:
                    raise ClusterError(f"the replicas are in state {self._current()}, step {step} of lineage "
                                       f"{lineage} cannot run again")
                self.retries += 1
                results = self._gather(self._submit(update, [one], None, len(failures)))
                done = [r for r in results if r["ys"] is not None]
                if not done:
                    raise ReplicaMismatch("no worker held the step's state")
                self.lineage, self.driver_current = (lineage, step + 1), False
                self.last_ys = _losses(done[0])[-1]
                if {r["worker"] for r in results} != {r["worker"] for r in done} or \
                        any(r["status"] == "missing" for r in results):
                    self._recover_quietly()
                return
            except _retryable() as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                if len(failures) > self.max_retries:
                    raise ClusterError(f"a data-parallel step failed {len(failures)} times as workers were lost; "
                                       f"last: {failures[-1]}") from None
                self._recover_quietly()

    def _gather(self, pending: PendingSteps) -> list[dict]:
        if not pending.direct:
            return self.client.gather(pending.futures)
        return [self._call_result(worker, call) for worker, call in zip(pending.workers, pending.futures)]

    def _call_result(self, worker: str, call: Any) -> dict:
        """The result of a StepRunner call; CommClosedError if its worker left (Dask would wait for
        the actor to come back on that very worker, which it never does)."""
        made = self.runners.get(worker, (None, None))[0]
        while True:
            try:
                return call.result(timeout=ACTOR_POLL)
            except TimeoutError:      # (an OSError too: first) the call still runs, or its worker is gone
                if made is None or made.status != "finished":
                    raise CommClosedError(f"worker {worker} left while running steps") from None
            except OSError as exc:
                raise CommClosedError(f"the step runner on worker {worker} is unreachable: {exc}") from None

    def _runners(self, workers: list[str]) -> dict[str, Any]:
        """A :class:`.worker.StepRunner` actor on each of ``workers`` (made on first use, kept while they live)."""
        for gone in set(self.runners) - set(workers):
            del self.runners[gone]
        made = {w: self.client.submit(StepRunner, self.spec, actor=True, workers=[w], allow_other_workers=False,
                                      pure=False, key=f"gradreg-runner-{self.plugin_name}-{uuid.uuid4().hex[:8]}")
                for w in workers if w not in self.runners}
        for w, future in made.items():
            self.runners[w] = (future, future.result())
        return {w: actor for w, (_, actor) in self.runners.items()}

    def _with_retries(self, once, start: State | None):
        failures: list[str] = []   # messages only: an exception would keep the failed step's futures alive
        for attempt in range(self.max_retries + 1):
            try:
                return once(attempt)
            except _retryable() as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                self.retries += 1
                self._recover_quietly()
                if start is not None and self.lineage == (start[0], start[1] + 1):
                    return self.last_ys     # the step was applied before its failure showed
        raise ClusterError(f"a data-parallel step failed {len(failures)} times as workers were lost; "
                           f"last: {failures[-1]}")

    def _recover_quietly(self) -> None:
        for _ in range(self.max_retries + 1):
            try:
                self._recover()
                return
            except _cluster_failures():
                continue

    def _split(self, feeds: Mapping[Any, Any], split) -> tuple[dict, list[Shard]]:
        if self.closed:
            raise GradregError("this DataParallel is closed")
        if isinstance(feeds, ResidentBatch):
            return self._split_resident(feeds)
        common, shards = split_feeds(feeds, split if split is not None else self.split, self.shards, self.reduction)
        if len(shards) > 1 or not self.relax_batch:
            self._check_splittable(feeds, shards)
        return common, shards

    def _split_resident(self, batch: ResidentBatch) -> tuple[dict, list[Shard]]:
        data = self.resident.get(batch.data)
        if data is None or data.closed:
            raise FeedError(f"the batch's data '{batch.data}' was not scattered by this DataParallel, or is closed")
        shards = [Shard(rows, size, weight) for rows, size, weight in batch.split(self.shards, self.reduction)]
        if len(shards) > 1 or not self.relax_batch:
            for name in data.shapes:
                _check_shard_sizes(name, self.graph.get_tensor(name).shape.as_list() or [None], 0, shards)
        return {}, shards

    def _check_splittable(self, feeds: Mapping[Any, Any], shards: list[Shard]) -> None:
        """FeedError on the driver for a shard that the graph's fixed batch size cannot take."""
        full_shapes = {tensor_name(k): np.shape(v) for k, v in feeds.items()}
        first = shards[0].feeds
        assert not isinstance(first, Rows)     # resident rows are checked by _split_resident
        for name, part in first.items():
            try:
                dims = self.graph.get_tensor(name).shape.as_list() or []
            except GradregError:
                raise FeedError(f"feed '{name}' names no tensor of the graph") from None
            split_axes = [i for i, (a, b) in enumerate(zip(full_shapes[name], part.shape)) if a != b] or [0]
            fixed = [i for i in split_axes if i < len(dims) and dims[i] is not None]
            if fixed:
                _check_shard_sizes(name, dims, fixed[0], shards)

    def _shard_futures(self, workers: list[str], common: dict, shards: list[Shard], tag: str) -> list:
        return [self.client.submit(shard_gradients, self.spec, self._current(), _payload(common, shard), shard.weight,
                                   key=f"gradreg-shard-{tag}-{i}", pure=False,
                                   workers=[workers[i % len(workers)]], allow_other_workers=True)
                for i, shard in enumerate(shards)]

    def _reduce(self, parts: list, tag: str):
        """Pairwise sums on the workers, in shard order (so every run sums alike): ceil(log2(shards)) levels."""
        level = 0
        while len(parts) > 1:
            pairs = [self.client.submit(add_pair, parts[i], parts[i + 1], pure=False,
                                        key=f"gradreg-sum-{tag}-{level}-{i // 2}")
                     for i in range(0, len(parts) - 1, 2)]
            parts = pairs + parts[len(pairs) * 2:]
            level += 1
        return parts[0]

    def _record(self, shards: list[Shard], workers: list[str], result: dict) -> None:
        self.last_step = {"shards": len(shards), "levels": tree_levels(len(shards)), "workers": len(workers),
                          "shard_bytes": sum(_sent_bytes(s) for s in shards),
                          "result_bytes": sizeof(result.get("grads")) + sizeof(result["ys"])}

    def _wait_for_a_worker(self) -> list[str]:
        """The workers' addresses, after waiting up to ``worker_timeout`` for one to exist."""
        workers = sorted(self.client.nthreads())
        if workers:
            return workers
        try:
            self.client.wait_for_workers(1, timeout=self.worker_timeout)
        except TimeoutError:
            raise ClusterError(f"the Dask cluster has no workers (waited {self.worker_timeout:g} s)") from None
        return sorted(self.client.nthreads())

    # -- data resident on the workers -------------------------------------------------------------
    def scatter(self, arrays: Mapping[Any, Any]) -> ResidentData:
        """Send the split feeds' arrays (every example, along axis 0) to every worker once; batches
        of the result (:meth:`.data.ResidentData.batches`) then travel as row numbers. See
        :mod:`gradreg.distributed.data`.

            data = dp.scatter({"x:0": x_train, "labels:0": y_train})
            dp.train(optimizer, data.batches(128, shuffle=True, seed=0), steps=1000)
        """
        if self.closed:
            raise GradregError("this DataParallel is closed")
        named = {tensor_name(k): v for k, v in arrays.items()}
        for name, value in named.items():
            try:
                tensor = self.graph.get_tensor(name)
            except GradregError:
                raise FeedError(f"scatter: '{name}' names no tensor of the graph") from None
            dims = tensor.shape.as_list()
            shape = np.shape(value)
            if dims is not None and (len(dims) != len(shape) or
                                     any(d is not None and d != s for d, s in zip(dims[1:], shape[1:]))):
                raise FeedError(f"scatter: feed '{name}' has the shape {dims} in the graph; the array's examples "
                                f"have the shape {list(shape[1:])} (all of them: {list(shape)})")
        data = ResidentData(self.client, named)
        self.resident[data.name] = data
        return data

    # -- training ------------------------------------------------------------------------------
    def train(self, optimizer, dataset, steps: int, **options) -> list[float]:
        """Synchronous data-parallel training; see :func:`gradreg.distributed.trainer.train`."""
        return train(self, optimizer, dataset, steps, **options)

    @property
    def global_step(self) -> int:
        """The global step (0 before training)."""
        return global_step_value(self)

    def close(self) -> None:
        """Remove the graph (its plugin and replicas) from the workers."""
        if not self.closed:
            self.closed = True
            self.runners.clear()      # the actors go when their futures are released
            self.client.unregister_worker_plugin(self.plugin_name)
            for data in self.resident.values():
                data.close()

    def __enter__(self) -> DataParallel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def declared_axes(graph: gr.Graph, split: Sequence[str] | Mapping[str, int] | None) -> dict[str, int]:
    """The split feeds' batch axes as declared: ``split``'s entries, or every placeholder's axis 0."""
    if split is None:
        return {op.outputs[0].name: 0 for op in graph.get_operations() if op.type in PLACEHOLDERS}
    if isinstance(split, str):
        split = [split]
    if isinstance(split, Mapping):
        return {tensor_name(k): int(v) for k, v in split.items()}
    return dict(parse_split_entry(getattr(e, "name", e)) for e in split)


def _names(xs: Sequence[Any] | None) -> list[str]:
    return [getattr(x, "name", x) for x in xs or ()]


def _is_const(graph: gr.Graph, name: Any) -> bool:
    if not isinstance(name, str):
        return False
    try:
        return graph.get_operation_by_name(name.split(":")[0]).type == "Const"
    except (GradregError, KeyError):
        return False


def graph_bytes(graph_or_path: Any) -> bytes:
    """Binary GraphDef bytes of a Graph, of bytes (checked by loading), or of a .pb/.pbtxt file."""
    if isinstance(graph_or_path, gr.Graph):
        return graph_or_path.as_graph_def().SerializeToString()
    if isinstance(graph_or_path, (bytes, bytearray)):
        return bytes(graph_or_path)
    if isinstance(graph_or_path, (str, os.PathLike)):
        return gr.load_graph(graph_or_path).as_graph_def().SerializeToString()   # text files become binary
    raise GradregError(f"DataParallel needs a Graph, GraphDef bytes or a file path, not {type(graph_or_path).__name__}")


def _ancestor_ops(tensors: Sequence[Any]) -> set:
    """Every op the tensors depend on, through data and control inputs."""
    return set(needed_ops([t.op for t in tensors], set()))


def _x_name(x: Any) -> str:
    """A variable by its op name (the worker differentiates by the variable), a tensor by its name."""
    return x.op.name if isinstance(x, gr.Variable) else x.name


def _check_shard_sizes(name: str, dims: list, axis: int, shards: list[Shard]) -> None:
    """FeedError unless every shard holds the batch size the graph fixes for feed ``name`` along ``axis``."""
    sizes = sorted({s.size for s in shards})
    if dims[axis] is not None and sizes != [dims[axis]]:
        raise FeedError(f"feed '{name}' has the static shape {dims} in the graph: each shard must hold "
                        f"{dims[axis]} examples (these hold {', '.join(map(str, sizes))}); feed "
                        f"{len(shards)} x {dims[axis]} examples, or free the batch with relax_batch=True")


def _payload(common: dict, shard: Shard) -> dict | Rows:
    """What a shard's task is sent: its feeds, or the rows the worker takes them from (the feeds
    not split are inside those)."""
    return shard.feeds if isinstance(shard.feeds, Rows) else {**common, **shard.feeds}


def _sent_bytes(shard: Shard) -> int:
    """The bytes of a shard's feeds as sent: the arrays, or the row numbers and the unsplit feeds."""
    if isinstance(shard.feeds, Rows):
        index = shard.feeds.index
        return (index.nbytes if isinstance(index, np.ndarray) else 0) + int(sizeof(dict(shard.feeds.common)))
    return int(sizeof(shard.feeds))


def _losses(result: dict) -> list:
    """The loss values of each step a task ran: several for a task of consecutive steps."""
    return result["losses"] if "losses" in result else [result["ys"]]


def _retryable() -> tuple[type[BaseException], ...]:
    """The cluster failures, a replica in another state, and no worker in the expected state."""
    return (*_cluster_failures(), ReplicaMismatch, StopIteration)


def _cluster_failures() -> tuple[type[BaseException], ...]:
    """The errors meaning "a worker went away with something this step needs"."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    # OSError: connecting to a worker that died but is still listed times out
    return (KilledWorker, CancelledError, CommClosedError, OSError)
