"""The worker side of data-parallel training: a replica of the model per worker, resident between steps.

The GraphDef bytes reach every worker inside a :class:`GraphPlugin` (a Dask WorkerPlugin
named for their SHA-256). Per :class:`GradientSpec` (the loss, xs and options) the plugin
keeps one :class:`Replica`: the graph loaded from the bytes, its gradient graph, a
:class:`gradreg.Session` holding the variables (and, once training, the optimizer's update
and slots, built from the pickled optimizer the driver sends: the same ops, so the same
variable names, as on the driver), and the compiled callables.

Every replica carries a *state*: ``(lineage, step)``. The driver pushes its variables to
every worker once (a new lineage, step 0); from then on only shards, gradients and the
summed gradient move, and each worker applies the same update to its own copy, so the
copies stay equal bit for bit. Every task names the state it expects; a replica in another
state refuses (:class:`ReplicaMismatch`), and the driver then copies the most advanced
replica to the others (:meth:`Replica.export_state`, :meth:`Replica.import_state`) and runs
the step again. A shard's gradient depends only on the state and the shard, so a step run
again, on whichever worker, gives the same bits.
"""
from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import WorkerPlugin, get_worker, rejoin, secede

import gradreg as gr
from gradreg.distributed.data import Rows, resolve
from gradreg.distributed.errors import ReplicaMismatch
from gradreg.distributed.graphs import specialize
from gradreg.errors import GradientError, GradregError

State = tuple[str, int]
STEP_WAIT = 120.0   # seconds a task sent ahead waits for the step before it on its worker
IN_LOOP = 0.25       # seconds: a StepRunner call whose steps take less runs on the worker's event loop thread
MAX_SIZED = 4        # batch sizes a replica keeps a specialised graph for (an epoch's last batch is a second)
KEEP_LOSSES = 1024   # the losses of the last steps a replica remembers (steps in flight when a worker died)


@dataclass(frozen=True)
class GradientSpec:
    """What a worker builds from the graph bytes. Small and hashable: it travels with every task.

    ``plugin`` names the :class:`GraphPlugin` holding the bytes on the workers; ``digest`` is
    the SHA-256 of the GraphDef bytes; ``ys`` the (scalar) losses; ``xs`` the
    tensors or variables (by op name) to differentiate by; ``variables`` the op names of the
    variables the loss reads.
    """
    plugin: str
    digest: str
    ys: tuple[str, ...]
    xs: tuple[str, ...]
    variables: tuple[str, ...] = ()
    grad_ys: tuple[str, ...] | None = None
    stop_gradients: tuple[str, ...] = ()
    unconnected_gradients: str = "none"
    custom_gradient: str = "error"
    backend: str | None = None
    batch_axes: tuple[tuple[str, int], ...] = ()   # split feeds whose batch size varies: (name, axis)


class OptimizerUpdate:
    """An optimizer's update of the xs in a graph, fed the summed gradient of each variable.

    Built alike on the driver and on every worker from the same pickled optimizer, so the
    slots and the global step have the same names everywhere (checkpoints use them).
    """

    def __init__(self, graph: gr.Graph, graph_variables: dict, xs: Sequence[Any], blueprint: bytes):
        self.blueprint = blueprint          # the pickled optimizer: its key, and what the workers build from
        self.initialized = False            # on the driver: its new variables have values
        optimizer = fresh_optimizer(blueprint)
        tensors = [x.name for x in xs if not isinstance(x, gr.Variable)]
        if tensors:
            raise GradregError(f"training updates variables, but these xs are tensors: {', '.join(tensors)}")
        self.variables = list(xs)
        self.optimizer, self.graph = optimizer, graph
        with graph.as_default():
            before = {id(v) for v in gr.global_variables(graph)}
            self.step = global_step(graph, graph_variables)
            with graph.name_scope("data_parallel"):
                self.placeholders = [gr.placeholder(v.dtype.base_dtype, v.shape, name=f"{v.op.name}_grad")
                                     for v in self.variables]
            self.apply = optimizer.apply_gradients(list(zip(self.placeholders, self.variables)),
                                                   global_step=self.step)
            created = [v for v in gr.global_variables(graph) if id(v) not in before]
            self.initialize_created = gr.variables_initializer(created) if created else None
        self.fused: Any = None
        self.run_apply: Any = None
        self.steps: dict[tuple[str, ...], Any] = {}

    def run(self, session: gr.Session, grads: Sequence[Any]) -> None:
        _check_connected(self.variables, grads)
        if self.run_apply is None:   # compiled once: no per-step look-up of the plan by its fetches and feeds
            self.run_apply = session.make_callable(self.apply, self.placeholders)
        self.run_apply(*grads)

    def step_callable(self, session: gr.Session, ys: Sequence[Any], grads: Sequence[Any], feeds: tuple[str, ...]):
        """A callable of the whole step, fed ``feeds``: the loss ``ys`` and the update applying
        ``grads`` (the gradient tensors themselves) in one plan, as ``optimizer.minimize`` in one
        process builds it (a dense layer's weight gradient then goes straight into its weights,
        no gradient array). Its slots are the placeholders update's (the same optimizer object)."""
        run = self.steps.get(feeds)
        if run is None:
            if self.fused is None:
                _check_connected(self.variables, grads)
                with self.graph.as_default():
                    before = len(gr.global_variables(self.graph))
                    self.fused = self.optimizer.apply_gradients(list(zip(grads, self.variables)),
                                                                global_step=self.step)
                    if len(gr.global_variables(self.graph)) != before:
                        raise GradregError(f"{type(self.optimizer).__name__}: a second apply_gradients made new "
                                           f"variables; data-parallel training cannot keep them in step")
            run = self.steps[feeds] = session.make_callable([self.fused, *ys], list(feeds))
        return run


def _check_connected(variables: Sequence[Any], grads: Sequence[Any]) -> None:
    missing = [v.op.name for v, g in zip(variables, grads) if g is None]
    if missing:
        raise GradientError(f"no gradient for variable(s) {', '.join(missing)}: not connected to the loss "
                            f"(leave them out of xs)")


def global_step(graph: gr.Graph, graph_variables: dict):
    """The graph's global step: the model's own ``global_step`` variable if it has one, else a new one."""
    if not graph.get_collection(gr.GraphKeys.GLOBAL_STEP) and "global_step" in graph_variables:
        graph.add_to_collection(gr.GraphKeys.GLOBAL_STEP, graph_variables["global_step"])
    return gr.train.get_or_create_global_step(graph)


def fresh_optimizer(blueprint: bytes) -> Any:
    return pickle.loads(blueprint)


class Replica:
    """One graph's gradient graph, Session and variables on one worker (see the module docstring)."""

    def __init__(self, graph_bytes: bytes, spec: GradientSpec):
        self.spec = spec
        self.graph_bytes = graph_bytes
        self.graph, self.graph_variables, self.variables, self.ys, self.xs, self.grads = _differentiate(
            graph_bytes, spec)
        self.session = gr.Session(self.graph, backend=spec.backend)
        self.fetches = self.ys + [g for g in self.grads if g is not None]
        self.callables: dict[tuple[str, ...], Any] = {}
        self.updates: dict[bytes, OptimizerUpdate] = {}
        self.state: State | None = None
        self.last: dict[int, list] = {}      # step -> the ys of the update that led to it (kept for recovery)
        self.lock = threading.Lock()
        self.changed = threading.Condition()   # notified whenever the state moves
        self.busy = {"shard": 0.0, "apply": 0.0, "step": 0.0}  # seconds spent computing (not waiting), for benchmarks
        self.sized: dict[int, Sized | None] = {}   # the graph with its batch fixed, by batch size (None: failed)
        self.step_seconds = float("inf")    # the last whole step's compute (none yet: as long as can be)

    # -- evaluation -----------------------------------------------------------------------------
    def shard(self, feeds: dict[str, Any], weight: float) -> dict:
        """``{"ys": [...], "grads": [...]}`` for one shard, each multiplied by ``weight``."""
        start = time.perf_counter()
        names = tuple(feeds)
        run = self.callables.get(names)
        if run is None:
            run = self.callables[names] = self.session.make_callable(self.fetches, list(names))
        values = run(*feeds.values())
        ys, grads = values[:len(self.ys)], iter(values[len(self.ys):])
        self._check_scalar(ys)
        out = {"ys": [_scaled(v, weight) for v in ys],
               "grads": [_scaled(next(grads), weight) if g is not None else None for g in self.grads]}
        self.busy["shard"] += time.perf_counter() - start
        return out

    def expect(self, state: State) -> None:
        if self.state != state:
            raise ReplicaMismatch(f"the replica is in state {self.state}, the step expects {state}")

    # -- training -------------------------------------------------------------------------------
    def update(self, blueprint: bytes) -> OptimizerUpdate:
        """The update of ``blueprint`` (a pickled, unused optimizer), built on first use; its new
        variables (slots, global step) start from their initializers until a state is imported."""
        update = self.updates.get(blueprint)
        if update is None:
            update = self.updates[blueprint] = OptimizerUpdate(self.graph, self.graph_variables, self.xs, blueprint)
            if update.initialize_created is not None:
                self.session.run(update.initialize_created)
        return update

    def apply(self, blueprint: bytes, state: State, total: dict) -> str:
        """Apply the summed gradients of the step from ``state``: "applied", or "already" if this
        replica has applied it, or "missing" if it is in no state the step knows (a new worker)."""
        lineage, step = state
        if self.state == (lineage, step + 1):
            return "already"
        if self.state != state:
            return "missing"
        start = time.perf_counter()
        self.update(blueprint).run(self.session, total["grads"])
        self.busy["apply"] += time.perf_counter() - start
        self._advance(lineage, step, total["ys"])
        return "applied"

    def step(self, blueprint: bytes, state: State, feeds: dict[str, Any]) -> tuple[str, list | None]:
        """The whole step from ``state`` on one shard that is the whole batch: ``(status, ys)``,
        status as for :meth:`apply` (ys: the step's loss values; None when "missing").

        The loss, its gradients and the update run in one compiled plan, as ``minimize`` builds
        them in one process; every replica runs it on the same batch, so no gradient moves and
        the replicas stay equal bit for bit."""
        lineage, step = state
        if self.state is not None and self.state[0] == lineage and self.state[1] > step:
            return "already", self.last.get(step + 1)     # applied before (a call run again)
        if self.state != state:
            return "missing", None
        start = time.perf_counter()
        names = tuple(feeds)
        update = self.update(blueprint)          # (its new variables are made and set here)
        sized = self._sized(feeds)
        if sized is not None:
            run = sized.update(blueprint).step_callable(sized.session, sized.ys, sized.grads, names)
        else:
            run = update.step_callable(self.session, self.ys, self.grads, names)
        ys = [np.asarray(y) for y in run(*feeds.values())[1:]]
        self._check_scalar(ys)
        self.step_seconds = time.perf_counter() - start
        self.busy["step"] += self.step_seconds
        self._advance(lineage, step, ys)
        return "applied", ys

    def _advance(self, lineage: str, step: int, ys: list) -> None:
        """Step ``step`` of ``lineage`` applied: the next state, and its losses remembered (the last KEEP_LOSSES)."""
        self.set_state((lineage, step + 1))
        self.last.pop(step + 1 - KEEP_LOSSES, None)
        self.last[step + 1] = ys

    def _sized(self, feeds: dict[str, Any]) -> Sized | None:
        """The graph specialised to this batch's size (built on first use, up to MAX_SIZED sizes),
        or None: the batch axes are not known, the feeds disagree, or the specialised graph failed
        to build (the free graph then runs, as it would anyway)."""
        size = self._batch_size(feeds)
        if size is None:
            return None
        if size not in self.sized:
            if len(self.sized) >= MAX_SIZED:
                return None
            try:
                self.sized[size] = Sized(self, size)
            except GradregError:
                self.sized[size] = None
        return self.sized[size]

    def builds_for(self, batches: Sequence[dict[str, Any] | Rows]) -> bool:
        """Whether running ``batches`` would first build a graph sized to a batch size not seen yet."""
        if not self.spec.batch_axes or len(self.sized) >= MAX_SIZED:
            return False
        return any(size is not None and size not in self.sized for size in map(self._batch_size, batches))

    def _batch_size(self, feeds: dict[str, Any] | Rows) -> int | None:
        """The batch size of ``feeds`` along the spec's batch axes (rows: their count); None when
        the feeds name none of them or disagree."""
        if isinstance(feeds, Rows):
            return feeds.size
        sizes = {np.shape(feeds[name])[axis] for name, axis in self.spec.batch_axes
                 if name in feeds and -np.ndim(feeds[name]) <= axis < np.ndim(feeds[name])}
        return int(sizes.pop()) if len(sizes) == 1 else None

    def steps(self, blueprint: bytes, state: State, batches: Sequence[dict[str, Any]]) -> tuple[str, list | None]:
        """:meth:`step` on each batch in turn from ``state``: ``(status, the loss values of each
        step)``. Steps this replica applied already (a task run again) are skipped, their losses
        those it remembers; ("missing", None) if it is in no state of the steps."""
        lineage, start = state
        if self.state is None or self.state[0] != lineage or not start <= self.state[1] <= start + len(batches):
            return "missing", None
        losses: list = []
        ran = False
        for i, feeds in enumerate(batches):
            status, ys = self.step(blueprint, (lineage, start + i), feeds)
            ran = ran or status == "applied"
            losses.append(ys)
        return ("applied" if ran else "already"), losses

    def _check_scalar(self, ys: Sequence[Any]) -> None:
        for name, value in zip(self.spec.ys, ys):
            if np.ndim(value) != 0:
                raise GradregError(f"loss '{name}' has shape {list(np.shape(value))}: data-parallel "
                                   f"evaluation sums the shards' losses and needs scalars")

    # -- state ----------------------------------------------------------------------------------
    def export_state(self) -> dict:
        """Everything another replica (or the driver) needs to continue from here."""
        variables = sorted(gr.global_variables(self.graph), key=lambda v: v.op.name)
        values = self.session.run(variables) if variables else []
        return {"state": self.state, "updates": list(self.updates), "last": dict(self.last),
                "values": {v.op.name: np.asarray(x) for v, x in zip(variables, values)}}

    def import_state(self, snapshot: dict) -> None:
        for blueprint in snapshot["updates"]:
            self.update(blueprint)
        variables = {v.op.name: v for v in gr.global_variables(self.graph)}
        for name, value in snapshot["values"].items():
            if name not in variables:
                raise GradregError(f"variable '{name}' of the snapshot is not in the worker's graph")
            variables[name].load(value, self.session)
        self.last = dict(snapshot.get("last", {}))
        self.set_state(snapshot["state"])

    def set_state(self, state: State | None) -> None:
        with self.changed:
            self.state = state
            self.changed.notify_all()

    def behind(self, state: State) -> bool:
        """Whether this replica is in ``state``'s lineage but has not reached it yet."""
        return self.state is not None and self.state[0] == state[0] and self.state[1] < state[1]

    def wait_for(self, state: State, timeout: float = STEP_WAIT) -> None:
        """Wait (outside the worker's thread pool) while this replica is behind ``state`` in the same
        lineage: a step sent ahead arrives before the update of the step before it is applied."""
        seceded = False
        with self.changed:
            if self.behind(state):
                secede()       # free the worker's thread for the task this one waits for
                seceded = True
                self.changed.wait_for(lambda: not self.behind(state), timeout)
        if seceded:
            rejoin()


class Sized:
    """A replica's graph with the split feeds' batch dimension fixed at ``size``, differentiated
    alike, its Session sharing the replica's variables (a variable is its name in a session's
    resources, as TensorFlow's resource manager keys them): a step of that size runs a plan whose
    shape arithmetic is folded when it is compiled, as in one process on the graph as written.
    The replica's state, copies and checkpoints go through the replica's own Session."""

    def __init__(self, replica: Replica, size: int):
        spec = replica.spec
        data = specialize(replica.graph_bytes, dict(spec.batch_axes), size)
        self.graph, self.graph_variables, _, self.ys, self.xs, self.grads = _differentiate(data, spec)
        self.session = gr.Session(self.graph, backend=spec.backend)
        self.session.resources = self.session.context.resources = replica.session.resources
        self.updates: dict[bytes, OptimizerUpdate] = {}

    def update(self, blueprint: bytes) -> OptimizerUpdate:
        """The optimizer's update in this graph: the same variable and slot names as the replica's,
        whose update made and set them (:meth:`Replica.update` runs first)."""
        update = self.updates.get(blueprint)
        if update is None:
            update = self.updates[blueprint] = OptimizerUpdate(self.graph, self.graph_variables, self.xs, blueprint)
        return update


def _differentiate(graph_bytes: bytes, spec: GradientSpec) -> tuple:
    """``(graph, its variables by name, the loss's variables, ys, xs, gradients)`` of ``spec`` in
    the graph loaded from ``graph_bytes``."""
    graph = gr.load_graph(graph_bytes)
    graph_variables = {v.op.name: v for v in gr.train.find_variables(graph)}
    variables = [_variable(graph_variables, name) for name in spec.variables]
    ys = [_tensor(graph, name, "loss") for name in spec.ys]
    xs = [graph_variables[name] if name in graph_variables else _tensor(graph, name, "xs") for name in spec.xs]
    with graph.as_default():
        grad_ys = [_tensor(graph, n, "grad_ys") for n in spec.grad_ys] if spec.grad_ys else None
        stop = [_tensor(graph, n, "stop_gradients") for n in spec.stop_gradients] or None
        grads = gr.gradients(ys, xs, grad_ys=grad_ys, stop_gradients=stop,
                             unconnected_gradients=spec.unconnected_gradients,
                             custom_gradient=spec.custom_gradient)
        # A gathered variable's IndexedSlices gradient is summed across shards as a dense array.
        grads = [gr.convert_to_tensor(g) if g is not None else None for g in grads]
    return graph, graph_variables, variables, ys, xs, grads


def _scaled(value: Any, weight: float) -> np.ndarray:
    array = np.asarray(value)
    # weight 1 (a sum-reduced loss, or a single shard) leaves the values bit for bit as computed.
    return array if weight == 1.0 else (array * array.dtype.type(weight)).astype(array.dtype, copy=False)


def _tensor(graph, name: str, role: str):
    try:
        return graph.get_tensor(name if ":" in name else f"{name}:0")
    except GradregError:
        raise GradregError(f"{role}: '{name}' names no tensor of the graph") from None


def _variable(found: dict, name: str):
    if name not in found:
        raise GradregError(f"variable '{name}' is not in the graph the worker loaded")
    return found[name]


class GraphPlugin(WorkerPlugin):
    """One graph on the workers: its GraphDef bytes and the :class:`Replica` built from them.

    :class:`~gradreg.distributed.DataParallel` registers one per graph, named
    ``gradreg-graph-<sha256>-<token>``. The bytes travel inside the plugin: the scheduler keeps
    it and installs it on every worker, including one that joins or restarts later, so the
    graph reaches each worker once and cannot be lost with a worker. (Scattered data would
    not do: Dask's active memory manager drops the extra replicas of a broadcast within
    seconds, and the next step would fetch the graph again.)
    """
    idempotent = True

    def __init__(self, name: str, graph_bytes: bytes):
        self.name = name
        self.graph_bytes = graph_bytes
        self.entries: dict[GradientSpec, Replica] = {}
        self.address = "?"
        self._lock = threading.Lock()

    def __getstate__(self):   # travels with the bytes only: each worker builds its own entries
        return {"name": self.name, "graph_bytes": self.graph_bytes}

    def __setstate__(self, state):
        self.__init__(state["name"], state["graph_bytes"])

    def setup(self, worker) -> None:
        self.address = worker.address

    def teardown(self, worker) -> None:
        self.entries.clear()

    def replica(self, spec: GradientSpec) -> Replica:
        """The entry for ``spec``, built on first use."""
        with self._lock:
            entry = self.entries.get(spec)
            if entry is None:
                entry = self.entries[spec] = Replica(self.graph_bytes, spec)
        return entry


def _plugin(spec: GradientSpec, worker=None) -> GraphPlugin:
    worker = worker if worker is not None else get_worker()
    plugin = worker.plugins.get(spec.plugin)
    if not isinstance(plugin, GraphPlugin):
        raise GradregError(f"worker {worker.address} has no graph '{spec.plugin}' (was its DataParallel closed?)")
    return plugin


def _on_replica(spec: GradientSpec, work, worker=None, wait: State | None = None):
    """Run ``work(replica)`` under the replica's lock (once it reached ``wait``); gradreg errors made portable."""
    plugin = _plugin(spec, worker)
    try:
        replica = plugin.replica(spec)
        if wait is not None:
            replica.wait_for(wait)
        with replica.lock:
            return work(replica)
    except ReplicaMismatch as exc:
        raise ReplicaMismatch(f"{exc} (on dask worker {plugin.address})") from None
    except GradregError as exc:
        raise portable_error(exc, plugin.address) from None


# -- tasks: each a pure function of (the replica's expected state, its arguments) ----------------
def shard_gradients(spec: GradientSpec, state: State, feeds: dict[str, Any] | Rows, weight: float) -> dict:
    """Task: the weighted ys and gradients of one shard (see :meth:`Replica.shard`); ``feeds``
    may be rows of data the worker holds (:mod:`.data`)."""
    def work(replica: Replica) -> dict:
        replica.expect(state)
        return replica.shard(resolve(feeds), weight)
    return _on_replica(spec, work, wait=state)


def add_pair(a: dict, b: dict) -> dict:
    """Task: one node of the tree reduction, the elementwise sum of two shard results."""
    return {"ys": [x + y for x, y in zip(a["ys"], b["ys"])],
            "grads": [None if x is None else x + y for x, y in zip(a["grads"], b["grads"])]}


def apply_update(spec: GradientSpec, blueprint: bytes, state: State, total: dict) -> dict:
    """Task: apply the step's summed gradients on this worker's replica (see :meth:`Replica.apply`)."""
    def work(replica: Replica) -> dict:
        status = replica.apply(blueprint, state, total)
        return {"status": status, "ys": total["ys"], "worker": get_worker().address}
    return _on_replica(spec, work)


class StepRunner:
    """A Dask actor on one worker, through which the driver runs whole steps of one shard on the
    worker's replica (:meth:`Replica.steps`) without the scheduler: a call goes from the driver
    to the worker and back, where a task goes driver -> scheduler -> worker -> scheduler ->
    driver and its result is fetched again (on a loaded 2-core machine 2.6 against 13 ms).

    Calls sent ahead may arrive out of order: a call for a state the replica has not reached
    waits (in the worker's event loop, not in a thread, woken when a call before it is done)
    until the one before it has run. The steps run one call at a time: on the worker's event
    loop thread when the call's steps take less than IN_LOOP seconds together (judged by the
    replica's last step; the worker answers again after that long), else on this runner's thread.
    """

    def __init__(self, spec: GradientSpec):
        self.spec = spec
        self.worker = get_worker()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="gradreg-steps")
        self.done: asyncio.Condition | None = None     # made in the worker's event loop, on the first call
        self.replica: Replica | None = None

    async def steps(self, blueprint: bytes, state: State, batches: list[dict[str, Any] | Rows]) -> dict:
        loop = asyncio.get_running_loop()
        if self.done is None:
            self.done = asyncio.Condition()
        replica = self.replica
        if replica is None:    # built (graph loaded, gradients taken) on the runner's thread, once
            replica = self.replica = await loop.run_in_executor(self.pool, _replica_of, self.spec, self.worker)
        deadline = loop.time() + STEP_WAIT
        async with self.done:
            while replica.behind(state) and loop.time() < deadline:
                # woken by the call before; a look every 50 ms in case the state moved otherwise (a copy)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.done.wait(), 0.05)
        try:
            if replica.step_seconds * len(batches) < IN_LOOP and not replica.builds_for(batches):
                # Short steps run on the event loop's thread, as client.run's functions do: handing the
                # GIL back and forth between it and a compute thread cost them 15-30% on a loaded machine.
                # (Not a call that first builds a graph sized to a new batch size: that takes seconds.)
                return _run_steps(self.spec, self.worker, blueprint, state, batches)
            return await loop.run_in_executor(self.pool, _run_steps, self.spec, self.worker, blueprint, state,
                                              batches)
        finally:
            async with self.done:
                self.done.notify_all()


def _replica_of(spec: GradientSpec, worker) -> Replica:
    replica: Replica = _on_replica(spec, lambda r: r, worker)
    return replica


def _run_steps(spec: GradientSpec, worker, blueprint: bytes, state: State,
               batches: list[dict[str, Any] | Rows]) -> dict:
    def work(replica: Replica) -> dict:
        status, losses = replica.steps(blueprint, state, [resolve(b, worker) for b in batches])
        return {"status": status, "ys": losses[-1] if losses else None, "losses": losses, "worker": worker.address,
                "step_seconds": replica.step_seconds}
    return _on_replica(spec, work, worker)


# -- run on workers directly (client.run): state queries and copies ------------------------------
def replica_state(spec: GradientSpec, dask_worker=None) -> dict | None:
    """``{"state": (lineage, step), "last": {step: ys}}`` of this worker's replica (None: none built yet)."""
    plugin = _plugin(spec, dask_worker)
    entry = plugin.entries.get(spec)
    return {"state": entry.state, "last": dict(entry.last)} if entry is not None else None


def export_state(spec: GradientSpec, dask_worker=None) -> dict:
    return _on_replica(spec, lambda replica: replica.export_state(), dask_worker)


def import_state(spec: GradientSpec, snapshot: dict, dask_worker=None) -> State:
    def work(replica: Replica) -> State:
        replica.import_state(snapshot)
        return snapshot["state"]
    return _on_replica(spec, work, dask_worker)


def portable_error(exc: GradregError, address: str) -> GradregError:
    """The same gradreg error class and text, naming the worker, and sure to unpickle on the driver.

    An exception whose constructor takes more than its message would otherwise reach the
    driver as a pickling traceback instead of the graph's error.
    """
    message = f"{exc} (on dask worker {address})"
    try:
        portable = type(exc)(message)
        pickle.loads(pickle.dumps(portable))
    except Exception:   # a class that does not rebuild from its message alone
        portable = GradientError(message) if isinstance(exc, GradientError) else GradregError(message)
    return portable
