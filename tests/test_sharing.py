"""A plan's call shares the GIL in short slices with gradreg's background work, and puts the
caller's switch interval back (gradreg.runtime.sharing)."""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import gradreg as gr
from gradreg.registry import get_registry
from gradreg.runtime import sharing
from gradreg.runtime.context import SessionContext
from gradreg.runtime.plan import PlanCompiler


@pytest.fixture
def caller_interval():
    """The caller's own switch interval, not the default, put back after the test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.003)
    yield 0.003
    sys.setswitchinterval(before)


def _recording_plan(monkeypatch, seen: list[float]):
    """A plan of y = Exp(x) whose kernel records the switch interval it runs under."""
    def kernel(value):
        seen.append(sys.getswitchinterval())
        return np.exp(value)
    return _exp_plan(monkeypatch, kernel)


def _exp_plan(monkeypatch, kernel):
    """A plan of y = Exp(x) whose Exp kernel is ``kernel``."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [3], name="x")
        y = gr.apply_op("Exp", x)
    registry = get_registry()
    original = registry.kernel_factory

    def factory(op_type, table):
        return (lambda op, ctx: kernel) if op_type == "Exp" else original(op_type, table)
    monkeypatch.setattr(registry, "kernel_factory", factory)
    return PlanCompiler(SessionContext(graph, None, "test", {}), ("numpy",)).compile([y], [x])


def test_without_background_work_a_call_leaves_the_interval_alone(monkeypatch, caller_interval):
    seen: list[float] = []
    plan = _recording_plan(monkeypatch, seen)
    value = np.array([0.0, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(plan([value])[0], np.exp(value))
    assert seen == [caller_interval]
    assert sys.getswitchinterval() == caller_interval


def test_beside_background_work_a_call_runs_in_short_slices_then_puts_the_interval_back(monkeypatch,
                                                                                         caller_interval):
    seen: list[float] = []
    plan = _recording_plan(monkeypatch, seen)
    value = np.array([0.0, 1.0, 2.0], np.float32)
    with sharing.background_work():
        np.testing.assert_allclose(plan([value])[0], np.exp(value))
        assert sys.getswitchinterval() == caller_interval      # between calls: the caller's
        plan([value])
    assert seen == [pytest.approx(sharing.SWITCH_INTERVAL)] * 2
    assert sys.getswitchinterval() == caller_interval
    plan([value])                                              # the work is done: nothing changed
    assert seen[-1] == caller_interval


def test_a_failing_call_puts_the_interval_back(monkeypatch, caller_interval):
    def kernel(value):
        raise ValueError("broken kernel")
    plan = _exp_plan(monkeypatch, kernel)
    with sharing.background_work(), pytest.raises(gr.errors.ExecutionError, match="broken kernel"):
        plan([np.zeros(3, np.float32)])
    assert sys.getswitchinterval() == caller_interval
    assert sharing._calls == 0


def test_the_last_of_concurrent_calls_puts_the_interval_back(caller_interval):
    with sharing.background_work():
        assert sharing.call_started()
        inside = threading.Event()
        leave = threading.Event()

        def other_call():
            assert sharing.call_started()
            inside.set()
            leave.wait(10)
            sharing.call_finished()
        thread = threading.Thread(target=other_call)
        thread.start()
        assert inside.wait(10)
        sharing.call_finished()                    # the first call returns; the other still runs
        assert sys.getswitchinterval() == pytest.approx(sharing.SWITCH_INTERVAL)
        leave.set()
        thread.join(10)
    assert sys.getswitchinterval() == caller_interval
    assert sharing.background == 0
