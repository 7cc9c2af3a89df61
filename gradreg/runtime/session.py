"""Session: run a graph with NumPy (and Numba) kernels.

    >>> sess = gradreg.Session(graph)
    >>> sess.run("y:0", {"x:0": np.ones(3, np.float32)})
    >>> sess.run([y, "z"], feed_dict={x: [1.0, 2.0, 3.0]})   # names or objects, nested fetches

A plan is compiled once per (fetches, feeds) and reused. The session keeps state
between runs (variables and other resources live in ``session.resources``).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gradreg import config, deadline
from gradreg.errors import FeedError, FetchError, GradregError
from gradreg.file_access import FileAccess
from gradreg.model import dtypes
from gradreg.model.graph import Graph, Operation, Tensor, get_default_graph
from gradreg.model.indexed_slices import IndexedSlices, IndexedSlicesValue
from gradreg.progress import task
from gradreg.registry import get_registry
from gradreg.runtime.context import SessionContext
from gradreg.runtime.executor import Executor

_log = "runtime"   # the logger gradreg.runtime (gradreg.progress)


def default_backend() -> str:
    """The backend GRADREG_BACKEND names, if it names an installed one; else the preferred
    available backend (numba when it is installed, else numpy)."""
    registry = get_registry()
    chosen = os.environ.get("GRADREG_BACKEND", "").strip().lower()
    if chosen in registry.backend_names():
        return chosen
    return registry.preferred_backend()


class Session:
    """Runs fetches of ``graph`` (default: the default graph).

    ``max_elements`` caps the size of any tensor a kernel allocates (checked before
    allocating); ``backend`` names an installed backend, "numpy" or "numba" (default: numba
    when it is installed; gradreg.registry lists them);
    ``check_outputs`` verifies every kernel's output dtype and shape against the graph
    (slower; the test suite turns it on with GRADREG_CHECK_OUTPUTS=1);
    ``loop_iteration_limit`` bounds every while loop (default
    ``gradreg.config.max_loop_iterations``, 10**7 unless GRADREG_MAX_LOOP_ITERATIONS says
    otherwise; 0: no limit); ``loop_timeout`` the seconds each loop may run (default
    ``gradreg.config.loop_timeout``, 10); ``timeout`` the seconds each run may take (default
    ``gradreg.config.timeout``, none; ``run(..., timeout=)`` for one run; see gradreg.deadline).
    ``allow_files`` lists directories the graph's file ops (SaveV2, RestoreV2, ...) may read and
    write, besides ``gradreg.config.allow_files``; without a grant they may only read inside the
    file or directory the graph was loaded from (gradreg.file_access, docs/security.md).
    """

    def __init__(self, graph: Graph | None = None, *, max_elements: int | None = None,
                 backend: str | None = None, check_outputs: bool | None = None,
                 loop_iteration_limit: int | None = None, allow_files: Sequence[str | os.PathLike[str]] = (),
                 loop_timeout: float | None = None, timeout: float | None = None):
        self.graph = graph if graph is not None else get_default_graph()
        self.backend = backend or default_backend()
        chosen = get_registry().backend(self.backend)     # GradregError naming the known backends
        if check_outputs is None:
            check_outputs = os.environ.get("GRADREG_CHECK_OUTPUTS", "") not in ("", "0")
        self.check_outputs = check_outputs
        self.resources: dict[str, Any] = {}
        self.context = SessionContext(self.graph, max_elements, self.backend, self.resources, session=self,
                                     loop_iteration_limit=loop_iteration_limit,
                                     files=FileAccess(self.graph.model_root, allow_files), loop_timeout=loop_timeout)
        self.loop_iteration_limit = self.context.loop_iteration_limit
        self.timeout = config.timeout if timeout is None else float(timeout)
        self.executor: Executor = chosen.create_executor(self.context, check_outputs)
        self.context.executor = self.executor   # library functions run on the same executor
        self._plans: dict[tuple[Any, ...], tuple[Callable[..., Any], list[Callable[..., Any]]]] = {}
        self._closed = False

    # -- public API ----------------------------------------------------------------
    @property
    def graph_def(self) -> Any:
        """The GraphDef of the session's graph (TensorFlow's Session.graph_def)."""
        return self.graph.as_graph_def()

    def run(self, fetches: Any, feed_dict: dict[Any, Any] | None = None, *, timeout: float | None = None) -> Any:
        """Evaluate ``fetches`` (a Tensor, Operation or name, or a list/tuple/dict of them)
        given ``feed_dict`` (tensor or name -> value). Operations fetch as None; an
        IndexedSlices fetches as an :class:`~gradreg.model.indexed_slices.IndexedSlicesValue`
        (values, indices, dense_shape), as in TensorFlow. ``timeout``: the seconds this run may
        take (default: the session's; DeadlineExceededError past it)."""
        if self._closed:
            raise GradregError("this Session is closed")
        flat, rebuild = _flatten(fetches)
        feed_dict = feed_dict or {}
        feed_keys = list(feed_dict)
        key = (tuple(_key(f) for f in flat), tuple(_key(k) for k in feed_keys), self.graph.version)
        cached = self._plans.get(key)
        if cached is None:
            cached = self._compile(flat, feed_keys)
            self._plans[key] = cached
        plan, converters = cached
        values = [convert(feed_dict[k]) for convert, k in zip(converters, feed_keys)]
        return rebuild(_as_fetched(self._call(plan, values, timeout)))

    def make_callable(self, fetches: Any, feed_list: Sequence[Any] = ()) -> Callable[..., Any]:
        """A function ``f(*feed_values)`` running ``fetches`` with the plan compiled once.

        The function is taken to be called again and again (a training step): with the numba
        backend, a plan of a few compiled loops builds them in its first call, as ``jax.jit``
        does, rather than in the background from its second (gradreg.backends.numba.jit)."""
        flat, rebuild = _flatten(fetches)
        plan, converters = self._compile(flat, list(feed_list))
        if hasattr(plan, "repeated"):    # a Plan (gradreg.runtime.plan, imported with the backends)
            plan.repeated = True

        def run(*values: Any) -> Any:
            if len(values) != len(converters):
                raise FeedError(f"expected {len(converters)} feed values, got {len(values)}")
            return rebuild(_as_fetched(self._call(plan, [c(v) for c, v in zip(converters, values)], None)))
        return run

    def plan_for(self, fetches: Any, feeds: Sequence[Any] = ()) -> Any:
        """What the executor compiled (a plan's ``source`` shows the generated code)."""
        flat, _ = _flatten(fetches)
        return self._compile(flat, list(feeds))[0]

    def close(self) -> None:
        self._closed = True
        self._plans.clear()
        self.resources.clear()
        self.context.function_plans.clear()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------
    def _call(self, plan: Callable[..., Any], values: list[Any], timeout: float | None) -> Any:
        """``plan(values)`` under the run's deadline, if it has one (see gradreg.deadline)."""
        call_deadline = deadline.for_call(self.timeout if timeout is None else timeout)
        if call_deadline is None:
            return plan(values)
        deadlines = self.context.deadlines
        deadlines.enter(call_deadline)
        try:
            return plan(values)
        finally:
            deadlines.leave(call_deadline)

    def _compile(self, flat: list[Any], feed_keys: list[Any]) -> tuple[Callable[..., Any], list[Callable[..., Any]]]:
        fetches = [self._resolve_fetch(f) for f in flat]
        feeds: list[Tensor] = []
        for k in feed_keys:
            t = self._resolve_feed(k)
            if t in feeds:
                raise FeedError(f"tensor {t.name} is fed twice")
            feeds.append(t)
        with task(_log, "compiling the plan"):
            plan = self.executor.compile(fetches, feeds)
        return plan, [_feed_converter(t) for t in feeds]

    def _resolve_fetch(self, fetch: Any) -> Tensor | Operation:
        if isinstance(fetch, (Tensor, Operation)):
            if fetch.graph is not self.graph:
                raise FetchError(f"fetch {fetch.name} belongs to a different graph than this session's")
            return fetch
        target = getattr(fetch, "_gradreg_fetch_", None)
        if target is not None:
            return self._resolve_fetch(target())
        if not isinstance(fetch, str):
            raise FetchError(f"cannot fetch {fetch!r}: expected a Tensor, Operation or name")
        try:
            return self.graph.as_graph_element(fetch)
        except GradregError:
            raise FetchError(f"fetch '{fetch}' does not exist in the graph") from None

    def _resolve_feed(self, key: Any) -> Tensor:
        if isinstance(key, Tensor):
            if key.graph is not self.graph:
                raise FeedError(f"feed {key.name} belongs to a different graph than this session's")
            return key
        convert = getattr(key, "_gradreg_tensor_", None)
        if convert is not None:
            return self._resolve_feed(convert(None))
        if not isinstance(key, str):
            raise FeedError(f"cannot feed {key!r}: expected a Tensor or tensor name")
        try:
            return self.graph.get_tensor(key)
        except GradregError:
            raise FeedError(f"feed '{key}' names no tensor of the graph") from None


def _as_fetched(values: Sequence[Any]) -> Sequence[Any]:
    """Fetched values as TensorFlow's session hands them out: arrays, and NumPy scalars
    (np.float32, bytes for strings, ...) for 0-d results."""
    if any(type(v) is np.ndarray and not v.ndim for v in values):
        return [v[()] if type(v) is np.ndarray and not v.ndim else v for v in values]
    return values


def _key(obj: Any) -> Any:
    return obj if isinstance(obj, str) else id(obj)


def _flatten(fetches: Any) -> tuple[list[Any], Callable[[Sequence[Any]], Any]]:
    """Flatten nested list/tuple/dict fetches; return the flat list and a function rebuilding
    the structure from flat values."""
    if isinstance(fetches, (list, tuple)):
        parts = [_flatten(f) for f in fetches]
        flat = [x for p, _ in parts for x in p]
        sizes = [len(p) for p, _ in parts]
        kind = type(fetches)

        def rebuild(values: Sequence[Any]) -> Any:
            out: list[Any] = []
            i = 0
            for (_, r), n in zip(parts, sizes):
                out.append(r(values[i:i + n]))
                i += n
            return out if kind is list else tuple(out) if kind is tuple else kind(*out)
        return flat, rebuild
    if isinstance(fetches, dict):
        keys = list(fetches)
        flat, inner = _flatten([fetches[k] for k in keys])
        return flat, lambda values: dict(zip(keys, inner(values)))
    if isinstance(fetches, IndexedSlices):
        # Fetched as TensorFlow's session fetches it: a (values, indices, dense_shape) value.
        components: list[Any] = [fetches.values, fetches.indices]
        if fetches.dense_shape is None:
            return components, lambda values: IndexedSlicesValue(values[0], values[1], None)
        return components + [fetches.dense_shape], lambda values: IndexedSlicesValue(*values)
    return [fetches], lambda values: values[0]


def _feed_converter(tensor: Tensor) -> Callable[[Any], Any]:
    """A function checking and converting one feed value for ``tensor`` (dtype, shape)."""
    dtype = tensor.dtype
    shape = tensor.shape
    name = tensor.name
    if dtype is None or dtype.kind in "rv":
        return lambda value: value
    storage = dtype.base_dtype.storage
    is_string = dtype.base_dtype is dtypes.string

    def convert(value: Any) -> Any:
        if is_string:
            array = np.asarray(value, dtype=object)
        else:
            array = np.asarray(value)
            if array.dtype != storage:
                if array.dtype.kind in "USO" or not (
                        np.can_cast(array.dtype, storage, casting="same_kind")
                        or (array.dtype.kind in "iu" and storage.kind in "iu")):
                    raise FeedError(f"cannot feed {array.dtype} value to {name}, which is {dtype.name}")
                array = array.astype(storage)
        if not shape.is_compatible_with(array.shape):
            raise FeedError(f"cannot feed value of shape {list(array.shape)} to tensor '{name}', which has shape "
                            f"{shape}")
        return array
    return convert
