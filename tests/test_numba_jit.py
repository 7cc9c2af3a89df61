"""When the numba backend compiles (gradreg.backends.numba.jit): a plan's first run uses NumPy
kernels and imports no numba; a reused plan gets its compiled kernels in the background."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends.numba import jit
from gradreg.registry import get_registry
from gradreg.registry.kernels import Tiered
from gradreg.runtime.context import SessionContext
from gradreg.runtime.plan import PlanCompiler

pytest.importorskip("numba")

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import gradreg as gr
    from gradreg.backends.numba import jit, kernels

    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [5, 10], name="x")
        y = gr.apply_op("Softmax", gr.sigmoid(gr.tanh(x * 0.5 + 1.0) - x) * 3.0)
    session = gr.Session(graph, backend="numba")
    plan = session.plan_for([y], [x])
    value = np.linspace(-3, 3, 50, dtype=np.float32).reshape(5, 10)
    first = plan([value])[0]
    bound = plan._fn.__globals__      # (timed for the second call: Plan.time_upgrades)
    waiting_after_first = sum(getattr(bound[name], "kernel", bound[name]) is tiered.initial
                              for name, tiered in plan.upgrades)
    from gradreg.backends import workers
    spinning_after_first = workers.POOLS.spinning is not None
    # the plan allocator and the pool's spin are made as the first call returns: no kernel
    engine = sys.modules.get("gradreg.backends.native.engine")
    from gradreg.backends.native import allocator
    after_first = "numba" in sys.modules or (
        engine is not None and engine.compiled_count() > allocator.ready() + spinning_after_first)
    second = plan([value])[0]
    done = jit.wait_for_kernels(120)
    third = plan([value])[0]
    kinds = sorted(type(plan._fn.__globals__[name]).__name__ for name, _ in plan.upgrades)
    print(json.dumps({"compiled_after_first": after_first, "waiting_after_first": waiting_after_first,
                      "spinning_after_first": spinning_after_first,
                      "done": done, "built": jit.kernels_built(),
                      "upgrades": len(plan.upgrades), "errors": jit.build_errors(), "kinds": kinds,
                      "same": [float(np.max(np.abs(a - first))) for a in (second, third)]}))
""")


def run_script(tmp_path, **env) -> dict:
    environment = dict(os.environ, GRADREG_CACHE_DIR=str(tmp_path), **env)
    environment.pop("GRADREG_JIT", None)
    environment.update(env)
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=environment, capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_first_run_imports_no_numba_and_reuse_builds_in_the_background(tmp_path):
    report = run_script(tmp_path)
    assert report["compiled_after_first"] is False
    assert report["done"] and not report["errors"]
    assert report["upgrades"] == 2 and report["built"] == 2     # the fused chain and the Softmax loop
    assert "function" in report["kinds"]                          # swapped for the built kernels
    assert report["same"] == [0.0, 0.0] or max(report["same"]) < 1e-6


def test_a_plan_built_before_loads_its_kernels_at_its_first_call(tmp_path):
    first = run_script(tmp_path)                 # builds in the background, leaves the plan's note
    assert first["built"] == 2 and first["waiting_after_first"] == 2
    notes = list((tmp_path / "plans").iterdir())
    assert len(notes) == 1
    again = run_script(tmp_path)                 # a new process: the note is found at the first call
    assert again["compiled_after_first"] is True
    assert again["waiting_after_first"] == 0     # every kernel swapped in before the second call
    # and the spinning pool made (GRADREG_SPIN=0 keeps it off)
    assert again["spinning_after_first"] is (os.environ.get("GRADREG_SPIN", "1").strip() != "0")
    assert again["built"] == 0                   # nothing left for the background thread
    assert max(again["same"]) < 1e-6
    notes[0].unlink()                            # without the note: the first call runs NumPy's kernels
    third = run_script(tmp_path)
    assert third["compiled_after_first"] is False and third["waiting_after_first"] == 2


def test_a_plan_whose_build_failed_leaves_no_note(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))

    def broken():
        raise RuntimeError("no compiler today")
    plan = _plan_with(Tiered(np.exp, broken, "Exp broken"), jit.tier_up, monkeypatch)
    value = np.array([0.0, 1.0, 2.0], np.float32)
    for _ in range(2):
        plan([value])
    assert jit.wait_for_kernels(30)
    assert not (tmp_path / "plans").exists()


def test_eager_mode_builds_before_the_first_run(tmp_path):
    report = run_script(tmp_path, GRADREG_JIT="eager")
    assert report["compiled_after_first"] is True
    assert report["built"] == 0           # nothing left for the background thread


def _plan_of_exps(kernels: list[Tiered], monkeypatch, tier_up=jit.tier_up, dtype=gr.float64):
    """A plan of a chain of Exps, x -> Exp -> Exp -> ..., the i-th Exp's kernel ``kernels[i]``."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(dtype, [3], name="x")
        y = x
        for i in range(len(kernels)):
            y = gr.apply_op("Exp", y, name=f"exp{i}")
    registry = get_registry()
    original = registry.kernel_factory

    def factory(op_type, table):
        if op_type == "Exp":
            return lambda op, ctx: kernels[int(op.name[3:])]
        return original(op_type, table)
    monkeypatch.setattr(registry, "kernel_factory", factory)
    return PlanCompiler(SessionContext(graph, None, "test", {}), ("numpy",), tier_up=tier_up).compile([y], [x])


def _plan_with(kernel: Tiered, tier_up, monkeypatch):
    """A plan of y = Exp(x) (float32) whose Exp kernel is ``kernel``."""
    return _plan_of_exps([kernel], monkeypatch, tier_up, gr.float32)


def test_a_failing_build_keeps_the_initial_kernel(monkeypatch):
    def broken():
        raise RuntimeError("no compiler today")
    kernel = Tiered(np.exp, broken, "Exp broken")
    plan = _plan_with(kernel, jit.tier_up, monkeypatch)
    value = np.array([0.0, 1.0, 2.0], np.float32)
    for _ in range(3):
        np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert jit.wait_for_kernels(30)
    np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert any("no compiler today" in e for e in jit.build_errors())


def test_without_a_policy_the_plan_builds_at_compile_time(monkeypatch):
    built = []

    def build():
        built.append(True)
        return lambda v: np.exp(v) + 0   # a different function object, same values
    plan = _plan_with(Tiered(np.exp, build, "Exp"), None, monkeypatch)
    assert built == [True]
    (name, _), = plan.upgrades
    assert plan._fn.__globals__[name] is not np.exp


def test_a_frozen_graph_tensorflow_wrote_compiles_nothing_at_call_time(monkeypatch):
    """Keras' MobileNetV2 as TensorFlow froze it (its weights Consts, some of them read-only
    arrays in the plan) and its gradient graph: once the background builds are done, no call
    compiles a loop in the caller's thread (a read-only variant, say); values as TensorFlow's."""
    from numba.core.registry import CPUDispatcher
    from tf_models import assert_close, load_case
    monkeypatch.setenv("GRADREG_JIT", "background")
    case = load_case("mobilenet_v2")

    from gradreg.backends.native import engine

    def signatures() -> dict:
        # every compiled numba loop: the generated and plugin modules (compile_module) loaded so
        # far (none, where every loop of these graphs is a native kernel)
        from gradreg.backends.numba import cache
        found = [d for module in cache.loaded_modules() for d in vars(module).values()
                 if isinstance(d, CPUDispatcher)]
        return {id(d): (d, len(d.signatures)) for d in found}
    for key in ("forward", "tf_grad"):
        graph = gr.load_graph(str(case.graph_path(key)))
        if key == "forward":
            expected = case.forward_values()
            fetches = list(expected)
        else:
            gradients = {x: t for x, t in case.gradient_tensors(key).items() if t}
            expected = {gradients[x]: value for x, value in case.gradient_values().items() if x in gradients}
            fetches = list(expected)
        session = gr.Session(graph, backend="numba")
        feeds = case.feeds(key)
        failed_before = len(jit.build_errors())      # (the process's list: other tests' builds too)
        for _ in range(2):
            session.run(fetches, feeds)
        assert jit.wait_for_kernels(300) and jit.build_errors()[failed_before:] == []
        built, native_built = signatures(), engine.compiled_count()
        values = [session.run(fetches, feeds) for _ in range(2)][-1]
        compiled = [d.py_func.__qualname__ for k, (d, n) in signatures().items() if n != built.get(k, (None, 0))[1]]
        assert compiled == [], key
        assert engine.compiled_count() == native_built, key      # nor a native kernel
        assert len(fetches) >= (1 if key == "forward" else 50)
        for name, value in zip(fetches, values):
            assert_close(value, expected[name], f"{key} {name}", case.tolerance)


def _upgrade(name: str, weight: float = 0.0, family=None) -> Tiered:
    return Tiered(np.exp, lambda: np.exp, name, weight=weight, family=family)


def test_builds_go_by_what_their_families_took_in_a_call():
    upgrades = [("k1", _upgrade("Conv2D stem", weight=1e9)),          # heaviest by weight, 1 ms
                ("k2", _upgrade("DepthwiseConv2dNative a")),
                ("k3", _upgrade("fused:x", family=("loop", 1))),
                ("k4", _upgrade("DepthwiseConv2dNative b")),
                ("k5", _upgrade("fused:y", family=lambda: ("loop", 2))),   # worked out when ordered
                ("k6", _upgrade("fused:z", family=("loop", 1))),
                ("k7", _upgrade("Softmax s"))]                          # not called: last
    seconds = {"k1": 1e-3, "k2": 0.6e-3, "k3": 0.5e-3, "k4": 0.7e-3, "k5": 0.9e-3, "k6": 0.3e-3}
    order = [name for name, _ in jit.build_order(upgrades, seconds)]
    # the depthwise family took 1.3 ms, fused loop 1 0.8 ms, Conv2D 1.0, loop 2 0.9; in each
    # family the slowest kernel first
    assert order == ["k4", "k2", "k1", "k5", "k3", "k6", "k7"]
    assert jit.family(upgrades[1][1]) == "DepthwiseConv2dNative" and jit.family(upgrades[2][1]) == ("loop", 1)
    assert jit.family(upgrades[4][1]) == ("loop", 2)
    # nothing measured: by weight, a family together
    by_weight = [("a", _upgrade("Add p", weight=5)), ("b", _upgrade("Mul q", weight=9)),
                 ("c", _upgrade("Add r", weight=6))]
    assert [name for name, _ in jit.build_order(by_weight, {})] == ["c", "a", "b"]


def test_a_plan_times_its_upgrades_for_one_call(monkeypatch):
    calls = []

    def slow_exp(x):
        calls.append(1)
        return np.exp(x)
    kernel = Tiered(slow_exp, lambda: np.exp, "Exp timed")
    plan = _plan_with(kernel, lambda plan, calls: False, monkeypatch)
    value = np.array([0.0, 1.0], np.float32)
    (name, _), = plan.upgrades
    plan.time_upgrades()
    np.testing.assert_allclose(plan([value])[0], np.exp(value))
    np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert len(calls) == 2
    times = plan.upgrade_times()
    assert set(times) == {name} and times[name] > 0
    assert plan._fn.__globals__[name] is slow_exp          # the wrapper taken away
    assert plan.upgrade_times() == {}
    # a kernel installed while timing stays
    plan.time_upgrades()
    plan.install(name, np.exp)
    assert plan.upgrade_times() == {name: 0.0} and plan._fn.__globals__[name] is np.exp


def test_the_full_collection_comes_as_the_first_call_returns(tmp_path, monkeypatch):
    """Loading a graph and making a plan leaves many objects for Python's collector; its full
    pass (tens of ms with the GIL held) is made as the first call returns, not in a later call;
    the builder's young collections keep its builds' objects from counting toward another."""
    import gc
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))
    full = []

    def note(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(threading.current_thread().name)
    plan = _plan_with(Tiered(np.exp, lambda: np.exp, "Exp"), jit.tier_up, monkeypatch)
    value = np.array([0.0, 1.0], np.float32)
    gc.callbacks.append(note)
    try:
        plan([value])
        assert full == [threading.current_thread().name]
        for _ in range(3):
            plan([value])
        assert jit.wait_for_kernels(30)
        assert len(full) == 1
    finally:
        gc.callbacks.remove(note)
    assert plan._fn.__globals__[plan.upgrades[0][0]] is np.exp


def test_the_policy_is_asked_before_the_first_call_runs(tmp_path, monkeypatch):
    """The plan asks its policy with 0 calls before its first call runs, then as each call
    returns; the numba policy makes LLVM and the plan allocator ready then (the first call's
    arrays come from it, and the second finds them there), and works out the kernels' families
    as the first call returns, not in the second."""
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))
    events: list[tuple[str, int]] = []

    def exp(x):
        events.append(("run", 0))
        return np.exp(x)
    plan = _plan_with(Tiered(exp, lambda: np.exp, "Exp"), lambda plan, calls: events.append(("asked", calls)) or
                      calls >= 2, monkeypatch)
    value = np.array([0.0, 1.0], np.float32)
    for _ in range(4):
        np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert events == [("asked", 0), ("run", 0), ("asked", 1), ("run", 0), ("asked", 2), ("run", 0), ("run", 0)]

    # the numba policy: the compiler loaded before the first run; the family worked out in the first call
    order: list[str] = []
    monkeypatch.setattr(jit, "_load_compiler", lambda: order.append("compiler"))
    worked_out: list[int] = []

    def family():
        worked_out.append(len([e for e in order if e == "run"]))
        return "exp loop"

    def exp_again(x):
        order.append("run")
        return np.exp(x)
    plan = _plan_with(Tiered(exp_again, lambda: np.exp, "Exp", family=family), jit.tier_up, monkeypatch)
    for _ in range(3):
        np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert jit.wait_for_kernels(30)
    assert order[:2] == ["compiler", "run"] and order.count("compiler") == 1
    assert worked_out == [1]        # once, after the first run (the second's order used it)
    assert plan._fn.__globals__[plan.upgrades[0][0]] is np.exp


def test_build_order_takes_the_families_worked_out_before():
    def not_again():
        raise AssertionError("worked out again")
    upgrades = [("a", _upgrade("fused:a", family=not_again)), ("b", _upgrade("fused:b", family=not_again)),
                ("c", _upgrade("Softmax c"))]
    order = jit.build_order(upgrades, {"a": 1e-3, "b": 2e-3, "c": 2.5e-3}, {"a": ("loop", 1), "b": ("loop", 1)})
    assert [name for name, _ in order] == ["b", "a", "c"]      # the loop's 3 ms before Softmax's 2.5


def _recorded_exp(order: list[str]) -> Tiered:
    """An Exp kernel whose NumPy version's runs and whose build are noted in ``order``."""
    def build():
        order.append("build")
        return lambda v: np.exp(v) + 0

    def initial(v):
        order.append("initial")
        return np.exp(v)
    return Tiered(initial, build, "Exp")


def test_the_eager_policy_builds_before_the_first_run_and_makes_the_pool(monkeypatch):
    """GRADREG_JIT=eager: the kernels built, with LLVM and the allocator loaded, before the first
    call runs; the spinning pool made as it returns; nothing asked after (a plan given no policy
    never made the allocator nor the pool: 1.5x slower steady steps)."""
    order: list[str] = []
    monkeypatch.setattr(jit, "_load_compiler", lambda: order.append("compiler"))
    monkeypatch.setattr(jit.workers, "spin_pool", lambda: order.append("pool"))
    tiered = _recorded_exp(order)
    plan = _plan_with(tiered, jit.tier_up_eager, monkeypatch)
    assert order == []                 # not at compile time: before the first call runs
    value = np.array([0.0, 1.0], np.float32)
    for _ in range(3):
        np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert order == ["compiler", "build", "pool"]
    (name, _), = plan.upgrades
    assert plan._fn.__globals__[name] is not tiered.initial
    assert plan._tier_up is None       # done: later calls ask nothing


def test_a_plan_made_to_be_called_again_builds_in_its_first_call(tmp_path, monkeypatch):
    """A plan made to be called again (Session.make_callable) builds its kernels in its first
    call, after running it with the NumPy ones (its inputs then known), and leaves its note; a
    plan not marked so leaves them to the second."""
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))
    order: list[str] = []
    monkeypatch.setattr(jit, "_load_compiler", lambda: order.append("compiler"))
    monkeypatch.setattr(jit.workers, "spin_pool", lambda: order.append("pool"))
    value = np.array([0.0, 1.0], np.float32)
    plan = _plan_with(_recorded_exp(order), jit.tier_up, monkeypatch)
    plan.repeated = True
    np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert order == ["compiler", "initial", "build", "pool"]
    assert plan._tier_up is None and len(list((tmp_path / "plans").iterdir())) == 1
    np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert order.count("initial") == 1        # the second call ran the built kernel

    order.clear()
    tiered = _recorded_exp(order)
    other = _plan_with(tiered, jit.tier_up, monkeypatch)
    other.upgrades[0] = (other.upgrades[0][0], dataclasses.replace(tiered, name="Exp other", family="other"))
    other([value])                             # not marked: NumPy's kernels until the second call
    assert order == ["compiler", "initial", "pool"]


def test_a_plan_made_to_be_called_again_builds_in_its_first_call_for_its_budget_then_in_the_background(
        tmp_path, monkeypatch):
    """Its first call builds the kernels, those that took longest in it first, until
    FIRST_CALL_SECONDS have passed; the rest are queued to the background thread, and the note
    is left once all are built."""
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_load_compiler", lambda: None)
    monkeypatch.setattr(jit, "_threads_ready", lambda: None)
    monkeypatch.setattr(jit, "FIRST_CALL_SECONDS", 0.12)
    built: list[int] = []

    def kernel(i: int) -> Tiered:
        def initial(v):
            if i == 3:
                time.sleep(0.02)          # the slowest in the first call: built first
            return np.exp(v)

        def build():
            time.sleep(0.05)
            built.append(i)
            return np.exp
        return Tiered(initial, build, f"Exp {i}", family=f"loop {i}")
    plan = _plan_of_exps([kernel(i) for i in range(5)], monkeypatch)
    plan.repeated = True
    value = np.array([-3.0, -2.0, -1.0])
    expected = value
    for _ in range(5):
        expected = np.exp(expected)
    np.testing.assert_allclose(plan([value])[0], expected)
    first = list(built)
    assert first[0] == 3                       # by what it took in the first call
    assert 1 <= len(first) <= 3                # 0.05 s each, 0.12 s to build in
    assert not (tmp_path / "plans").exists()   # no note while some are left
    assert jit.wait_for_kernels(30)
    assert sorted(built) == [0, 1, 2, 3, 4]
    assert len(list((tmp_path / "plans").iterdir())) == 1
    bound = plan._fn.__globals__
    assert all(bound[name] is np.exp for name, _ in plan.upgrades)
    np.testing.assert_allclose(plan([value])[0], expected)


def test_a_plan_made_to_be_called_again_whose_build_failed_in_its_first_call_leaves_no_note(
        tmp_path, monkeypatch):
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_load_compiler", lambda: None)
    monkeypatch.setattr(jit, "_threads_ready", lambda: None)

    def broken():
        raise RuntimeError("no compiler today")

    def initial(v):
        return np.exp(v)
    plan = _plan_of_exps([Tiered(initial, broken, "Exp 0"), Tiered(initial, lambda: np.exp, "Exp 1", family="b")],
                         monkeypatch)
    plan.repeated = True
    value = np.array([-1.0, 0.0, 1.0])
    with pytest.warns(RuntimeWarning, match="no compiler today"):
        np.testing.assert_allclose(plan([value])[0], np.exp(np.exp(value)))
    assert not (tmp_path / "plans").exists()         # loaded next time, it would miss a kernel
    bound = plan._fn.__globals__
    assert {tiered.name: bound[name] is initial for name, tiered in plan.upgrades} == {"Exp 0": True, "Exp 1": False}
    np.testing.assert_allclose(plan([value])[0], np.exp(np.exp(value)))


def test_make_callable_marks_its_plan_to_be_called_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GRADREG_JIT", raising=False)
    seen: list[tuple[int, bool]] = []
    original = jit.tier_up

    def tier_up(plan, calls):
        seen.append((calls, plan.repeated))
        return original(plan, calls)
    monkeypatch.setattr(jit, "tier_up", tier_up)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4], name="x")
        y = gr.tanh(x * 2.0 + 1.0) * 3.0
    value = np.linspace(-1, 1, 4, dtype=np.float32)
    expected = np.tanh(value * 2 + 1) * 3
    session = gr.Session(graph, backend="numba")
    np.testing.assert_allclose(session.run(y, {x: value}), expected, rtol=1e-6)
    assert seen == [(0, False), (1, False)]
    seen.clear()
    run = session.make_callable(y, [x])
    np.testing.assert_allclose(run(value), expected, rtol=1e-6)
    assert seen == [(0, True), (1, True)]       # and built then: asked nothing more
    np.testing.assert_allclose(run(value), expected, rtol=1e-6)
    assert seen == [(0, True), (1, True)]
