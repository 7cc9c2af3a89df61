"""Side tasks (gradreg.backends.call_modes.SideTasks, gradreg.runtime.plan.side_candidates): nodes whose
value only other side nodes or the fetches read (a CNN's weight gradients) run on the spinning pool's
worker while the plan goes on. The values are those of running them in order; a failing side node is
named in the error, as any other; the worker is let go after every call, failed or not; a call that
cannot have the worker runs them in place."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends import call_modes, threads, workers
from gradreg.errors import ExecutionError
from gradreg.runtime.plan import side_candidates

pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(threads.cores() < 2, reason="one core: no side worker")


@pytest.fixture
def side_on(monkeypatch):
    """The side worker on for every task, whatever else runs on this machine; the tasks counted."""
    if workers.spin_pool() is None:
        pytest.skip("the spinning pool is switched off here (GRADREG_SPIN=0)")
    monkeypatch.delenv("GRADREG_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("GRADREG_SIDE_TASKS", "on")          # not tried both ways: always on
    monkeypatch.setattr(threads, "blas_limit", lambda: 0)     # whatever BLAS count the suite runs with
    monkeypatch.setattr(call_modes, "SIDE_MIN_BYTES", 0)
    counts = {"deferred": 0, "inline": 0, "worker": 0}
    submit, run = call_modes.SideTasks.submit, call_modes.Deferred.run

    def counting_submit(self, fn, *args):
        value = submit(self, fn, *args)
        counts["deferred" if type(value) is call_modes.Deferred else "inline"] += 1
        return value

    def counting_run(self):
        if threading.current_thread().name.startswith("gradreg-kernel"):
            counts["worker"] += 1
        run(self)
    monkeypatch.setattr(call_modes.SideTasks, "submit", counting_submit)
    monkeypatch.setattr(call_modes.Deferred, "run", counting_run)
    yield counts
    assert threads.HOLDS.side_workers == 0 and not workers.spin_pool().lock.locked()   # let go after each call


def _session(g):
    """A numba Session without output checks (tests/conftest.py turns them on; they keep every
    node in place)."""
    return gr.Session(g, backend="numba", check_outputs=False)


def _weight_gradients_graph(seed=0):
    """Two dense layers: the weight gradients (and the Sum chain of a bias gradient) are side
    nodes; the input gradient is not."""
    rng = np.random.default_rng(seed)
    g = gr.Graph()
    with g.as_default():
        x = gr.placeholder(gr.float64, [None, 64], name="x")
        w1 = gr.constant(rng.normal(size=(64, 96)), name="w1")
        b1 = gr.constant(rng.normal(size=(96,)), name="b1")
        w2 = gr.constant(rng.normal(size=(96, 8)), name="w2")
        h = gr.tanh(gr.matmul(x, w1) + b1)
        loss = gr.reduce_sum(gr.square(gr.matmul(h, w2)))
        grads = gr.gradients(loss, [x, w1, b1, w2])
    return g, x, loss, grads, rng.normal(size=(256, 64))


def _handwritten(g, x_value):
    w1, b1, w2 = (g.get_tensor_by_name(n).op.get_attr("value") for n in ("w1:0", "b1:0", "w2:0"))
    w1, b1, w2 = (np.asarray(v) for v in (w1, b1, w2))
    z = x_value @ w1 + b1
    h = np.tanh(z)
    y = h @ w2
    dy = 2 * y
    dh = dy @ w2.T
    dz = dh * (1 - h ** 2)
    return [np.sum(y ** 2), dz @ w1.T, x_value.T @ dz, dz.sum(0), h.T @ dy]


def test_weight_gradients_run_on_the_worker_with_the_values_of_running_in_order(side_on):
    g, x, loss, grads, x_value = _weight_gradients_graph()
    session = _session(g)
    for _ in range(3):
        got = session.run([loss, *grads], {x: x_value})
        for value, want in zip(got, _handwritten(g, x_value)):
            np.testing.assert_allclose(value, want, rtol=1e-10, atol=1e-10)
    assert side_on["deferred"] > 0 and side_on["worker"] + side_on["deferred"] > 0
    call_modes.SIDE_MIN_BYTES = 1 << 60           # every node in place (monkeypatch restores it)
    in_place = _session(g).run([loss, *grads], {x: x_value})
    for a, b in zip(got, in_place):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_side_candidates_are_short_fetched_chains_of_pure_nodes():
    g, x, loss, grads, _ = _weight_gradients_graph()
    from gradreg.model.traversal import needed_ops, topological_order
    fetch_ops = [t.op for t in [loss, *grads]]
    items = topological_order(needed_ops(fetch_ops, {x}), "plan")
    side = side_candidates(items)
    names = {op.name for op in side}
    dx, dw1, db1, dw2 = (t.op for t in grads)
    assert {dw1, dw2, db1, dx} <= side
    forward = [op for op in items if op.type in ("MatMul", "Tanh") and not op.name.startswith("gradients")]
    assert len(forward) == 3 and not side & set(forward)
    # a side node is read only by side nodes: nothing outside waits for the worker
    for op in items:
        if op not in side:
            assert not any(i.op in side for i in op.inputs), (op.name, names)


def test_an_error_in_a_side_task_names_its_node_and_the_worker_is_let_go(side_on):
    g = gr.Graph()
    with g.as_default():
        a = gr.placeholder(gr.float64, None, name="a")
        b = gr.placeholder(gr.float64, None, name="b")
        product = gr.matmul(a, b, name="bad_product")      # fetched, read by nothing: a side node
        total = gr.reduce_sum(a, name="total")
    session = _session(g)
    with pytest.raises(ExecutionError, match="bad_product"):
        session.run([total, product], {a: np.ones((300, 200)), b: np.ones((300, 200))})
    assert side_on["deferred"] >= 1
    value, = session.run([product], {a: np.ones((3, 2)), b: np.ones((2, 4))})   # the next call works
    np.testing.assert_array_equal(value, np.full((3, 4), 2.0))


def test_a_failing_main_node_drops_the_waiting_side_tasks(side_on):
    g = gr.Graph()
    with g.as_default():
        a = gr.placeholder(gr.float64, None, name="a")
        c = gr.placeholder(gr.float64, None, name="c")
        side = gr.matmul(a, a, transpose_b=True, name="side_product")
        bad = gr.matmul(c, c, name="bad_main")             # read by the fetched sum: not a side node
        out = gr.reduce_sum(bad, name="out")
    session = _session(g)
    with pytest.raises(ExecutionError, match="bad_main"):
        session.run([side, out], {a: np.ones((200, 200)), c: np.ones((3, 2))})
    value, _ = session.run([side, out], {a: np.ones((2, 2)), c: np.ones((2, 2))})
    np.testing.assert_array_equal(value, np.full((2, 2), 2.0))


def test_with_one_thread_allowed_side_nodes_run_in_place(monkeypatch, side_on):
    monkeypatch.setenv("GRADREG_THREADS", "1")
    g, x, loss, grads, x_value = _weight_gradients_graph(1)
    got = _session(g).run([loss, *grads], {x: x_value})
    for value, want in zip(got, _handwritten(g, x_value)):
        np.testing.assert_allclose(value, want, rtol=1e-10, atol=1e-10)
    assert side_on["deferred"] == 0 and side_on["inline"] > 0


def test_two_sessions_in_two_threads_share_the_worker(side_on):
    g, x, loss, grads, x_value = _weight_gradients_graph(2)
    want = _handwritten(g, x_value)
    session = _session(g)
    failures = []

    def work():
        try:
            for _ in range(20):
                for value, expected in zip(session.run([loss, *grads], {x: x_value}), want):
                    np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)
        except Exception as exc:   # reported below
            failures.append(exc)
    workers = [threading.Thread(target=work) for _ in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert failures == []


def test_a_task_reading_another_waits_for_it_and_an_error_is_raised_once(monkeypatch):
    monkeypatch.setattr(call_modes, "SIDE_MIN_BYTES", 0)
    side = call_modes.SideTasks()
    side.held, side.pool = True, None          # queue only: this thread runs every task at take
    first = side.submit(lambda v: v * 2, np.arange(3))
    second = side.submit(lambda v: v + 1, first)
    assert type(first) is call_modes.Deferred and type(second) is call_modes.Deferred
    side.finish()
    np.testing.assert_array_equal(side.take(second), [1, 3, 5])
    late = call_modes.SideTasks()
    late.held, late.pool = True, None
    left = late.submit(lambda v: v - 1, np.arange(2))      # never run by a finish: take runs it
    np.testing.assert_array_equal(late.take(left), [-1, 0])
    failing = call_modes.SideTasks()
    failing.held, failing.pool = True, None
    bad = failing.submit(lambda v: 1 / 0, np.zeros(1))
    after = failing.submit(lambda v: v, bad)
    failing.finish()
    with pytest.raises(ZeroDivisionError):
        failing.take(bad)
    with pytest.raises(ZeroDivisionError):
        failing.take(after)


def test_check_outputs_keeps_every_node_in_place(side_on):
    g, x, loss, grads, x_value = _weight_gradients_graph(3)
    checked = gr.Session(g, backend="numba", check_outputs=True)
    assert "_side" not in checked.plan_for([loss, *grads], [x]).source
    session = _session(g)
    plan = session.plan_for([loss, *grads], [x])
    assert "_side.submit(" in plan.source and "_side.take(" in plan.source
    for value, want in zip(session.run([loss, *grads], {x: x_value}), _handwritten(g, x_value)):
        np.testing.assert_allclose(value, want, rtol=1e-10, atol=1e-10)
    assert side_on["deferred"] > 0


def test_a_plan_tries_its_modes_and_keeps_the_fastest(monkeypatch, side_on):
    monkeypatch.setenv("GRADREG_SIDE_TASKS", "auto")
    import gradreg.runtime.plan as plan_module
    g, x, loss, grads, x_value = _weight_gradients_graph(4)
    session = _session(g)
    plan = session.plan_for([loss, *grads], [x])
    assert set(plan.mode_times) == {"side", "split", "single"}
    plan._installed = len(plan.upgrades)                  # as if its compiled kernels were in
    monkeypatch.setattr(plan_module, "MODE_SETTLE", 0)
    # with side tasks, each call takes 5 ms longer: the plan keeps another mode
    submit = call_modes.SideTasks.submit

    def slow_submit(self, fn, *args):
        import time
        time.sleep(0.005)
        return submit(self, fn, *args)
    monkeypatch.setattr(call_modes.SideTasks, "submit", slow_submit)
    want = _handwritten(g, x_value)
    # the trial's calls at most (a decision within the margin runs its schedule again)
    for _ in range(plan_module.longest_trial()):
        if plan.trials:
            break
        assert plan.mode == "side"    # side tasks until the trial has chosen
        for value, expected in zip(plan([x_value]), want):
            np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)
    assert plan.trials == 1 and plan.mode in ("split", "single")
    assert plan._trial_from == plan._runs + plan_module.MODE_RETRY       # tried again later
    before = side_on["deferred"]
    plan([x_value])
    assert side_on["deferred"] == before                 # no side task from now on


def _on_a_virtual_clock(monkeypatch, plan, cost, tick: float = 0.0, clock: list[float] | None = None) -> list[str]:
    """Time ``plan``'s trial of its modes on a virtual clock (no timing in unit tests: the machine
    may be busy): each reading advances it by ``tick``, and a call in mode ``m`` costs ``cost(m)``
    seconds more; ``clock``, if given, holds the time (a test may move it on). Returns the modes
    of the calls, in order."""
    import gradreg.runtime.plan as plan_module
    clock = clock if clock is not None else [0.0]

    class VirtualTime:
        @staticmethod
        def perf_counter() -> float:
            clock[0] += tick
            return clock[0]
    monkeypatch.setattr(plan_module, "time", VirtualTime)
    calling, ran = [""], []

    def marked(mode, maker):
        def make():
            calling[0] = mode
            return maker()
        return make
    for mode in list(plan._makers):
        plan._makers[mode] = marked(mode, plan._makers[mode])
    run_plan = plan._fn

    def timed_run(*args):
        ran.append(calling[0])
        clock[0] += cost(calling[0])
        return run_plan(*args)
    plan._fn = timed_run
    return ran


def _plan_on_trial(monkeypatch, size):
    """(gradreg.runtime.plan, graph, x's value, plan) for _weight_gradients_graph(size), its
    compiled kernels taken as in and its trial of modes starting at its next call."""
    monkeypatch.setenv("GRADREG_SIDE_TASKS", "auto")
    import gradreg.runtime.plan as plan_module
    g, x, loss, grads, x_value = _weight_gradients_graph(size)
    plan = _session(g).plan_for([loss, *grads], [x])
    plan._installed = len(plan.upgrades)
    monkeypatch.setattr(plan_module, "MODE_SETTLE", 0)
    return plan_module, g, x_value, plan


def test_a_plan_keeps_to_one_thread_when_that_is_fastest(monkeypatch, side_on):
    plan_module, g, x_value, plan = _plan_on_trial(monkeypatch, 6)
    limits = []
    # each clock reading advances a microsecond; a call in the other modes costs 30 ms more
    _on_a_virtual_clock(monkeypatch, plan, lambda mode: 0.03 if mode in ("side", "split") else 0.0, tick=1e-6)
    single_submit = call_modes.SingleThreaded.submit

    def watching_submit(fn, *args):
        limits.append((threads.max_threads(), threads.HOLDS.side_workers))
        return single_submit(fn, *args)
    monkeypatch.setattr(call_modes.SingleThreaded, "submit", staticmethod(watching_submit))
    want = _handwritten(g, x_value)
    allowed = threads.max_threads()          # what the process allows (its cores, BLAS's count)
    for _ in range(3 * plan_module.MODE_ROUNDS * plan_module.MODE_BLOCK + 3):
        for value, expected in zip(plan([x_value]), want):
            np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)
        assert threads.HOLDS.single_calls == 0 and threads.max_threads() == allowed   # let go after each call
    assert plan.mode == "single" and plan.trials == 1, plan.mode_medians
    assert limits and set(limits) == {(1, 0)}            # one thread, no side worker, inside the calls


def test_a_failing_single_threaded_call_lets_the_limit_go(monkeypatch):
    monkeypatch.delenv("GRADREG_THREADS", raising=False)
    g = gr.Graph()
    with g.as_default():
        a = gr.placeholder(gr.float64, None, name="a")
        bad = gr.matmul(a, a, name="bad_product")
    plan = _session(g).plan_for([bad], [a])
    plan.mode = "single"
    allowed = threads.max_threads()          # what the process allows (its cores, BLAS's count)
    with pytest.raises(ExecutionError, match="bad_product"):
        plan([np.ones((3, 2))])
    assert threads.HOLDS.single_calls == 0 and threads.max_threads() == allowed
    np.testing.assert_array_equal(plan([np.ones((2, 2))])[0], np.full((2, 2), 2.0))


def test_gradreg_side_tasks_off_runs_every_node_in_place(monkeypatch, side_on):
    monkeypatch.setenv("GRADREG_SIDE_TASKS", "off")
    g, x, loss, grads, x_value = _weight_gradients_graph(5)
    session = _session(g)
    for _ in range(3):
        for value, expected in zip(session.run([loss, *grads], {x: x_value}), _handwritten(g, x_value)):
            np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)
    assert side_on["deferred"] == 0 and side_on["inline"] == 0


def _calls_to_decide(plan, plan_module, g, x_value) -> int:
    """Call ``plan`` until its trial has decided; the calls it took."""
    want = _handwritten(g, x_value)
    calls = 0
    while plan.trials == 0:
        calls += 1
        assert calls <= plan_module.longest_trial() + 3
        for value, expected in zip(plan([x_value]), want):
            np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)
    return calls


@pytest.mark.parametrize("slower, kept", [(0.05, "single"), (0.3, "faster")])
def test_more_threads_must_be_clearly_faster_than_one(monkeypatch, side_on, slower, kept):
    # a virtual clock again: every call takes 30 ms, one-thread calls ``slower`` more; a mode
    # with more threads is kept only when one thread is MODE_MARGIN (10%) slower than it, and a
    # decision within the margin is taken only after the trial ran its schedule again
    plan_module, g, x_value, plan = _plan_on_trial(monkeypatch, 5)
    _on_a_virtual_clock(monkeypatch, plan, lambda mode: 0.03 * (1 + slower) if mode == "single" else 0.03)
    calls = _calls_to_decide(plan, plan_module, g, x_value)
    schedule = 3 * plan_module.MODE_ROUNDS * plan_module.MODE_BLOCK
    assert calls == (schedule * (1 + plan_module.MODE_MORE) if kept == "single" else schedule), calls
    assert (plan.mode == "single") == (kept == "single"), plan.mode_medians


def test_a_close_trial_pools_its_rounds_before_it_keeps_one_thread(monkeypatch, side_on):
    # virtual clock: one-thread calls take 30 ms; the others 29 ms in the trial's first schedule
    # (within the margin: noise, a neighbour) and 20 ms after: the pooled medians (24.5 ms) keep
    # more threads, where the first schedule alone kept one thread
    plan_module, g, x_value, plan = _plan_on_trial(monkeypatch, 5)
    schedule = 3 * plan_module.MODE_ROUNDS * plan_module.MODE_BLOCK
    ran: dict[str, list[str]] = {}

    def cost(mode: str) -> float:     # the calls so far, this one included, are in ran["modes"]
        return 0.03 if mode == "single" else 0.029 if len(ran["modes"]) <= schedule else 0.02
    ran["modes"] = _on_a_virtual_clock(monkeypatch, plan, cost)
    calls = _calls_to_decide(plan, plan_module, g, x_value)
    assert calls == 2 * schedule
    assert plan.mode != "single", plan.mode_medians
    assert plan.mode_medians["single"] == pytest.approx(0.03)


def test_a_mode_far_slower_than_another_runs_no_more_calls_in_the_trial(monkeypatch, side_on):
    # virtual clock: one-thread calls take 10 ms, the others 200 ms (a neighbour holding the
    # core a split waits for); once both have a timed call, the slow modes' calls stop
    plan_module, g, x_value, plan = _plan_on_trial(monkeypatch, 5)
    ran = _on_a_virtual_clock(monkeypatch, plan, lambda mode: 0.01 if mode == "single" else 0.2)
    want = _handwritten(g, x_value)
    calls = 0
    while plan.trials == 0:
        calls += 1
        assert calls < 3 * plan_module.MODE_ROUNDS * plan_module.MODE_BLOCK
        for value, expected in zip(plan([x_value]), want):
            np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)
    assert plan.mode == "single", plan.mode_medians
    slow_modes = len(plan._makers) - 1
    # each slow mode: its block's untimed call, its first timed one, and (when it came before any
    # one-thread call) the rest of that block; never its second round
    assert ran.count("single") == plan_module.MODE_ROUNDS * plan_module.MODE_BLOCK
    assert len(ran) - ran.count("single") <= slow_modes * plan_module.MODE_BLOCK


def _turns_after_idle(monkeypatch, plan, plan_module, g, x_value, cost, turns: int) -> list[list[tuple[float, str]]]:
    """Decide ``plan``'s trial on a virtual clock, then make ``turns`` turns of 8 calls, each
    after 0.5 s idle; ``cost(mode, cold)`` is a call's seconds, ``cold`` for the calls starting
    within 0.09 s of the turn's start. Returns each turn's calls: (start after the turn's
    start, mode)."""
    clock, cold = [0.0], [False]
    ran = _on_a_virtual_clock(monkeypatch, plan, lambda mode: cost(mode, cold[0]), clock=clock)
    want = _handwritten(g, x_value)
    while plan.trials == 0:
        plan([x_value])
    calls = []
    for _ in range(turns):
        clock[0] += 0.5
        begun = clock[0]
        calls.append([])
        for _ in range(8):
            at = clock[0] - begun
            cold[0] = at < 0.09
            for value, expected in zip(plan([x_value]), want):
                np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)
            calls[-1].append((at, ran[-1]))
    return calls


@pytest.mark.parametrize("single_cold", [0.016, 0.028, 0.05])
def test_calls_after_idle_run_in_the_mode_measured_fastest_for_them(monkeypatch, side_on, single_cold):
    # back to back more threads win (10 ms against 14 ms on one thread: close enough for the
    # calls after idle to try one thread, COLD_TRY_WITHIN); the calls starting in the first 90 ms
    # after idle take 30 ms with more threads, and single_cold on one thread (28 ms: faster, but
    # not by COLD_MARGIN, so the trial's mode stays)
    plan_module, g, x_value, plan = _plan_on_trial(monkeypatch, 5)
    monkeypatch.setattr(plan_module, "COLD_STRETCH", 0.09)

    def cost(mode: str, cold: bool) -> float:
        if mode == "single":
            return single_cold if cold else 0.014
        return 0.03 if cold else 0.01
    turns = _turns_after_idle(monkeypatch, plan, plan_module, g, x_value, cost, 10)
    chosen = plan.mode
    assert chosen != "single", plan.mode_medians

    def stretch(turn):      # the modes of the calls in the cold stretch, and of those after it
        return {m for at, m in turn if at < 0.09}, {m for at, m in turn if at >= 0.09}
    # choosing: turns in turn on one thread and in the trial's mode, three each; after the
    # stretch, the trial's mode again
    for turn in turns[:6]:
        inside, after = stretch(turn)
        assert len(inside) == 1 and after == {chosen}
    assert sorted(stretch(turn)[0].pop() for turn in turns[:6]) == sorted(["single"] * 3 + [chosen] * 3)
    expected = "single" if single_cold < (1 - plan_module.COLD_MARGIN) * 0.03 else chosen
    assert plan.cold_mode == expected, plan.cold_medians
    assert plan.cold_medians == {"single": pytest.approx(single_cold), chosen: pytest.approx(0.03)}
    for turn in turns[6:]:
        assert stretch(turn) == ({expected}, {chosen})


def test_calls_after_idle_do_not_try_one_thread_when_it_was_far_behind(monkeypatch, side_on):
    # one thread took 2.5x the split's time in the trial (COLD_TRY_WITHIN: 1.5x): the calls after
    # idle stay in the trial's mode, even were one thread faster for them, and no stretch is
    # spent choosing
    plan_module, g, x_value, plan = _plan_on_trial(monkeypatch, 5)
    monkeypatch.setattr(plan_module, "COLD_STRETCH", 0.09)

    def cost(mode: str, cold: bool) -> float:
        if mode == "single":
            return 0.016 if cold else 0.025
        return 0.03 if cold else 0.01
    turns = _turns_after_idle(monkeypatch, plan, plan_module, g, x_value, cost, 8)
    chosen = plan.mode
    assert chosen != "single" and plan.mode_medians.get("single", 1.0) > plan_module.COLD_TRY_WITHIN * 0.01
    assert {m for turn in turns for _, m in turn} == {chosen}
    assert plan.cold_mode is None and not plan.cold_times
