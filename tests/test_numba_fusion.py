"""Plans of the numba backend (fused elementwise groups) compute what NumPy plans compute."""
from __future__ import annotations

import numpy as np
import pytest

import gradreg as gr
from gradreg.backends import native
from gradreg.backends.native import fused as native_fused
from gradreg.backends.numba import cache, codegen, grouping, kernels
from gradreg.errors import ElementLimitError, ExecutionError
from gradreg.model.graph import Operation
from gradreg.model.shape_inference import constant_value
from gradreg.model.traversal import needed_ops, topological_order
from gradreg.runtime.context import SessionContext as KernelContext

pytest.importorskip("numba")


def run(graph, fetches, feeds, backend):
    return gr.Session(graph, backend=backend).run(fetches, feeds)


def assert_backends_agree(graph, fetches, feeds, rtol=2e-6, atol=1e-6):
    fused = run(graph, fetches, feeds, "numba")
    reference = run(graph, fetches, feeds, "numpy")
    for got, want in zip(fused, reference):
        assert np.asarray(got).dtype == np.asarray(want).dtype
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return fused


def plan_items(fetches, feeds=()):
    """fuse()'s items for ``fetches``, after checking they respect every edge."""
    fed = set(feeds)
    ops = needed_ops([f.op if isinstance(f, gr.Tensor) else f for f in fetches], fed)
    items = grouping.fuse(topological_order(ops), fed, {f for f in fetches if isinstance(f, gr.Tensor)},
                        KernelContext())
    done: set = set()
    for item in items:
        members = [item] if isinstance(item, Operation) else item.ops
        for op in members:
            needs = [t.op for t in op.inputs if t not in fed and t.op in ops] + list(op.control_inputs)
            assert all(p in done or p in members for p in needs), f"{op.name} runs before its inputs"
        done.update(members)
    assert done == set(ops)
    return items


def groups(items):
    return [item for item in items if isinstance(item, kernels.FusedGroup)]


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(0)


def test_chain_is_one_fused_group(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None, 8], name="x")
        y = gr.sigmoid(gr.tanh(x * 1.5 + 0.25) - x) * 2.0
    (group,) = groups(plan_items([y], [x]))
    assert len(group.ops) == 6 and group.outputs == [y] and group.name.startswith("fused:")
    assert_backends_agree(graph, [y], {x: rng.standard_normal((50, 8)).astype(np.float32)})


def test_dag_with_shared_inputs_and_fetched_intermediates(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [None], name="x")
        y = gr.placeholder(gr.float64, [None], name="y")
        a = x * y
        b = gr.tanh(a)
        c = a + b
        d = c * x - gr.exp(y)
    fetches = [b, d, a]
    (group,) = groups(plan_items(fetches, [x, y]))
    assert set(group.outputs) == {a, b, d} and set(group.inputs) == {x, y}
    feeds = {x: rng.standard_normal(1000), y: rng.standard_normal(1000)}
    assert_backends_agree(graph, fetches, feeds, rtol=1e-13)


def test_scalars_broadcast_and_are_computed_once(rng):
    graph = gr.Graph()
    with graph.as_default():
        s = gr.placeholder(gr.float32, [], name="s")
        x = gr.placeholder(gr.float32, [None, 3], name="x")
        scaled = gr.exp(s) * 2.0   # scalar-only part of the group
        y = gr.maximum(x * scaled + s, 0.0)
    fetches = [y, scaled]
    assert len(groups(plan_items(fetches, [s, x]))) == 1
    for shape in [(4, 3), (0, 3), (1, 3)]:
        assert_backends_agree(graph, fetches, {s: np.float32(0.3), x: rng.standard_normal(shape).astype(np.float32)})


def test_a_bias_row_broadcasts_inside_the_group(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None, 6], name="x")
        b = gr.placeholder(gr.float32, [6], name="b")
        row = gr.exp(b) * 0.5               # a group of its own, of the row's shape
        y = gr.tanh(x * 2.0 + b) - row
    row_group, group = sorted(groups(plan_items([y, row], [x, b])), key=lambda g: len(g.ops))
    assert len(row_group.ops) == 2 and len(group.ops) == 4 and {x, b, row} <= set(group.inputs)
    session = gr.Session(graph, backend="numba")
    bias = rng.standard_normal(6).astype(np.float32)
    wide = rng.standard_normal((6, 9)).astype(np.float32)
    # Repeated shapes take the cached path; a new batch size, an empty batch, and a
    # non-contiguous input (a transposed view) take the full one.
    for value in [rng.standard_normal((4, 6)), rng.standard_normal((4, 6)), rng.standard_normal((1, 6)),
                  np.zeros((0, 6)), wide.T]:
        feeds = {x: value.astype(np.float32), b: bias}
        got = session.run([y, row], feeds)
        want = run(graph, [y, row], feeds, "numpy")
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


def test_runtime_shape_mismatch_falls_back(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None], name="x")
        y = gr.placeholder(gr.float32, [None], name="y")
        z = gr.tanh(x + y) * 2.0
    assert len(groups(plan_items([z], [x, y]))) == 1
    session = gr.Session(graph, backend="numba")
    for xv, yv in [(rng.standard_normal(5), rng.standard_normal(1)), (rng.standard_normal(5), rng.standard_normal(5)),
                   (rng.standard_normal(1), rng.standard_normal(4))]:
        feeds = {x: xv.astype(np.float32), y: yv.astype(np.float32)}
        np.testing.assert_allclose(session.run(z, feeds), run(graph, z, feeds, "numpy"), rtol=2e-6)


def test_error_inside_a_group_names_it():
    graph = gr.Graph()
    with graph.as_default():
        y = gr.placeholder(gr.float32, [None], name="y")
        dy = gr.placeholder(gr.float32, [None], name="dy")
        grad = gr.apply_op("TanhGrad", y * 2.0, dy, name="tanh_grad") * 3.0
    (group,) = groups(plan_items([grad], [y, dy]))
    assert "tanh_grad" in group.name
    with pytest.raises(ExecutionError, match=r"fused:.*tanh_grad.*same shape") as info:
        gr.Session(graph, backend="numba").run(grad, {y: np.ones(3, np.float32), dy: np.ones(2, np.float32)})
    assert info.value.node_name == group.name


def test_element_limit_inside_a_group():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None, 1], name="x")
        y = gr.placeholder(gr.float32, [1, None], name="y")
        z = gr.tanh(x + y) * 2.0
    session = gr.Session(graph, backend="numba", max_elements=1000)
    with pytest.raises(ElementLimitError, match="exceeds the limit"):
        session.run(z, {x: np.ones((100, 1), np.float32), y: np.ones((1, 100), np.float32)})
    assert session.run(z, {x: np.ones((10, 1), np.float32), y: np.ones((1, 10), np.float32)}).shape == (10, 10)


def test_no_group_around_an_outside_path(rng):
    """exp -> Sum -> mul: exp and mul cannot be one group (Sum runs between them)."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None], name="x")
        a = gr.exp(x) + 1.0
        total = gr.reduce_sum(a)
        y = gr.tanh(a * total) - a
    items = plan_items([y], [x])
    for group in groups(items):
        assert not ({a.op, y.op} <= set(group.ops))
    assert_backends_agree(graph, [y], {x: rng.standard_normal(100).astype(np.float32)})


def test_control_dependencies_are_kept(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None], name="x")
        first = gr.sigmoid(x * 3.0)
        with gr.control_dependencies([first.op]):
            second = gr.tanh(x) + 1.0
        out = second * first
    plan_items([out], [x])
    assert_backends_agree(graph, [out, first], {x: rng.standard_normal(64).astype(np.float32)})


def test_fetching_only_an_operation():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None], name="x")
        y = gr.tanh(x * 2.0)
    assert gr.Session(graph, backend="numba").run(y.op, {x: np.ones(4, np.float32)}) is None


def test_single_cheap_op_stays_numpy_and_costly_one_is_compiled():
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None], name="x")
        cheap = gr.exp(x)
        costly = gr.sigmoid(x)
    assert groups(plan_items([cheap], [x])) == []
    (group,) = groups(plan_items([costly], [x]))
    assert group.name == costly.op.name and group.type == "Sigmoid"


def test_variables_and_shapes_changing_between_runs(rng):
    graph = gr.Graph()
    with graph.as_default():
        v = gr.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), name="v")
        x = gr.placeholder(gr.float32, None, name="x")
        y = gr.tanh(v * 2.0 + x) * x
        init = gr.global_variables_initializer()
    sessions = {b: gr.Session(graph, backend=b) for b in ("numba", "numpy")}
    for s in sessions.values():
        s.run(init)
    for shape in [(2, 3), (), (1, 3)]:
        feeds = {x: rng.standard_normal(shape).astype(np.float32)}
        np.testing.assert_allclose(sessions["numba"].run(y, feeds), sessions["numpy"].run(y, feeds), rtol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_of_a_small_network(rng, dtype):
    graph = gr.Graph()
    t = gr.as_dtype(dtype)
    with graph.as_default():
        x = gr.placeholder(t, [None, 12], name="x")
        labels = gr.placeholder(t, [None, 4], name="labels")
        w1 = gr.constant(rng.standard_normal((12, 16)).astype(dtype), name="w1")
        b1 = gr.constant(rng.standard_normal(16).astype(dtype), name="b1")
        w2 = gr.constant(rng.standard_normal((16, 4)).astype(dtype), name="w2")
        h = gr.apply_op("Relu", gr.apply_op("BiasAdd", gr.matmul(x, w1), b1))
        h = gr.tanh(h * 0.5) + gr.sigmoid(h) * gr.apply_op("Softplus", h)
        probabilities = gr.apply_op("Softmax", gr.matmul(h, w2))
        loss = gr.reduce_sum(-labels * gr.log(probabilities + 1e-6))
        grads = gr.gradients(loss, [w1, b1, w2, x])
    feeds = {x: rng.standard_normal((32, 12)).astype(dtype),
             labels: np.eye(4, dtype=dtype)[rng.integers(0, 4, 32)]}
    tolerance = dict(rtol=2e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    assert_backends_agree(graph, [loss] + grads, feeds, **tolerance)


def test_without_numba_the_numpy_kernels_run(rng, monkeypatch):
    from gradreg_plugins.math import numba_kernels as math_kernels
    from gradreg_plugins.nn import numba_kernels as nn_kernels
    for module in (grouping, math_kernels, nn_kernels):
        monkeypatch.setattr(module, "numba_available", lambda: False)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None, 4], name="x")
        y = gr.apply_op("Softmax", gr.sigmoid(x * 2.0))
        total = gr.unsorted_segment_sum(y, [0, 1, 0], 2)
    assert groups(plan_items([y], [x])) == []
    assert_backends_agree(graph, [y, total], {x: rng.standard_normal((3, 4)).astype(np.float32)})


def fused_groups_of(session, fetches, feeds=()):
    """The fused groups a session's plan runs (from the plan's compiled code)."""
    plan = session.plan_for(fetches, feeds)
    found = {id(item): item for item in plan._compiled.line_ops.values() if isinstance(item, kernels.FusedGroup)}
    return list(found.values())


def test_static_shapes_take_the_static_wrapper(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4, 6], name="x")
        b = gr.placeholder(gr.float32, [6], name="b")
        v = gr.placeholder(gr.float32, [2, 4, 6], name="v")
        y = gr.tanh(x * 2.0 + b) * x                 # a full input and a row
        z = gr.sigmoid(v - b) * v                     # rank 3, the row indexed by the last index
    session = gr.Session(graph, backend="numba")
    (y_group,) = fused_groups_of(session, [y], [x, b])
    (z_group,) = fused_groups_of(session, [z], [v, b])
    built = {}
    for group in (y_group, z_group):
        built[group] = group.kernel.build()
        assert built[group].__name__ == "run"         # the static wrapper, not the general kernel
    assert codegen.static_states(y_group)[b] == codegen.ROW
    bias = rng.standard_normal(6).astype(np.float32)
    wide = rng.standard_normal((6, 4)).astype(np.float32)
    # A contiguous input, then a transposed view (strided: the general kernel takes it).
    for value in [rng.standard_normal((4, 6)).astype(np.float32), wide.T]:
        feeds = {x: value, b: bias, v: rng.standard_normal((2, 4, 6)).astype(np.float32)}
        got = session.run([y, z], feeds)
        want = run(graph, [y, z], feeds, "numpy")
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
    # Values that do not match the static shapes or types (a kernel that broke its
    # contract) take the general kernel, never the compiled loop's fixed bounds.
    (two,) = [t for t in y_group.inputs if t not in (x, b)]      # the constant 2.0
    for xv, bv, tv in [(np.ones((2, 6), np.float32), np.zeros(6, np.float32), np.float32(2)),
                       (np.ones((4, 6), np.float64), np.zeros(6, np.float64), np.float32(2)),
                       (np.ones((4, 6), np.float32), np.float32(0.5), np.float32(2)),
                       (np.ones((4, 6), np.float32), np.zeros(6, np.float32), np.array(2, np.float32))]:
        values = {x: xv, b: bv, two: tv}
        got = built[y_group](*[values[t] for t in y_group.inputs])
        np.testing.assert_allclose(got, np.tanh(xv * 2 + bv) * xv, rtol=2e-6)
    assert not codegen.generate_static_source(y_group, codegen.static_states(y_group)).count("reshape")


def test_groups_that_differ_only_in_size_share_one_loop(rng):
    """A network's repeated blocks give groups of the same ops at different sizes: their static
    loops take the extents as arguments, so they are one module, compiled and loaded once, and
    each computes its own size right (the outermost extent split over threads or not)."""
    graph = gr.Graph()
    outputs, feeds = [], []
    with graph.as_default():
        for k, shape in enumerate([(2, 5, 7, 8), (3, 4, 4, 24), (64, 64, 32, 16)]):
            x = gr.placeholder(gr.float32, shape, name=f"x{k}")
            b = gr.placeholder(gr.float32, shape[-1:], name=f"b{k}")
            outputs.append(gr.nn.relu6(x * 0.5 + b) * x)
            feeds.append((x, b))
    session = gr.Session(graph, backend="numba")
    planned = [fused_groups_of(session, [y], list(f))[0] for y, f in zip(outputs, feeds)]
    sources = {codegen.generate_static_source(g, codegen.static_states(g)) for g in planned}
    assert len(sources) == 1
    (source,) = sources
    assert "range(n3)" in source and "range(8)" not in source and "range(24)" not in source
    values = {}
    for (x, b) in feeds:
        values[x] = rng.standard_normal(x.shape.as_tuple()).astype(np.float32) * 4
        values[b] = rng.standard_normal(b.shape.as_tuple()).astype(np.float32)
    loops = set()
    for group, (x, b) in zip(planned, feeds):
        built = group.kernel.build()
        loop = built.__globals__["fused"]
        loops.add(loop)
        if native.available():      # a native kernel, one for the three (gradreg.backends.native.fused)
            assert loop is native_fused.static_loop(group, codegen.static_states(group))
        else:
            assert loop is cache.load_kernel(source)
        assert built.__name__ == "run"
        got = built(*[values.get(t, np.float32(0.5)) for t in group.inputs])
        want = np.clip(values[x] * 0.5 + values[b], 0, 6) * values[x]
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    assert len(loops) == 1
    assert_backends_agree(graph, outputs, values)


def test_read_only_inputs_take_the_precompiled_loops(rng, monkeypatch):
    # A plan's constants are read-only arrays, a type of their own to numba. The loops are
    # built for the inputs the NumPy kernels were given, so the first compiled call compiles
    # nothing in the caller's thread (behind the background builder's compiler lock). numba's
    # loops: native ones (the default) have one machine code for any array.
    monkeypatch.setenv("GRADREG_NATIVE", "0")
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4, 6], name="x")
        b = gr.placeholder(gr.float32, [6], name="b")
        y = gr.tanh(x * 2.0 + b) * x
    session = gr.Session(graph, backend="numba")
    (group,) = fused_groups_of(session, [y], [x, b])
    frozen = rng.standard_normal(6).astype(np.float32)
    frozen.setflags(write=False)

    def args(value):
        values = {x: value, b: frozen}
        return [values.get(t, np.float32(2)) for t in group.inputs]
    general = kernels._GroupKernel(group)
    static_value = rng.standard_normal((4, 6)).astype(np.float32)
    general.fallback_call(*args(static_value))          # what the plan's NumPy kernels see first
    static = kernels._static_kernel(group, codegen.static_states(group), general)
    other_value = rng.standard_normal((3, 6)).astype(np.float32)    # not the static shape
    general(*args(other_value))                          # queues the general loop's build
    from gradreg.backends.numba import jit
    assert jit.wait_for_kernels(120)
    before = {id(m.fused): len(m.fused.signatures) for m in cache.loaded_modules() if hasattr(m, "fused")}
    for kernel, value in [(static, static_value), (general, other_value)]:
        np.testing.assert_allclose(kernel(*args(value)), np.tanh(value * 2 + frozen) * value, rtol=2e-6)
    after = {id(m.fused): len(m.fused.signatures) for m in cache.loaded_modules() if hasattr(m, "fused")}
    assert after == before
    frozen_loops = [m.fused for m in cache.loaded_modules() if hasattr(m, "fused") and any(
        getattr(t, "mutable", True) is False for sig in m.fused.signatures for t in sig)]
    assert len(frozen_loops) >= 2        # the static loop and the general one


def test_scalar_ops_are_left_to_python_operators():
    graph = gr.Graph()
    with graph.as_default():
        i = gr.placeholder(gr.int32, [], name="i")
        s = gr.placeholder(gr.float32, [], name="s")
        out = [(i + 1) * 2, gr.exp(s) * 2.0 + s]
    assert not groups(plan_items(out, [i, s]))
    np.testing.assert_allclose(run(graph, out[1], {s: 0.5}, "numba"), np.exp(0.5) * 2 + 0.5, rtol=1e-6)


def test_elementwise_chains_fuse_inside_loop_bodies(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [3, 5], name="x")
        w = gr.placeholder(gr.float32, [5, 5], name="w")

        def body(t, h):
            z = gr.tanh(gr.matmul(h, w) * 0.5 + x)
            # a conditional inside the body: its ops may be dead, they keep their own guard
            z = gr.cond(t < 2, lambda: z * 2.0 - 1.0, lambda: gr.sigmoid(z) + x)
            return t + 1, z
        _, h = gr.while_loop(lambda t, h: t < 4, body, [0, x])
        loss = gr.reduce_sum(h * h)
        grads = gr.gradients(loss, [x, w])
    session = gr.Session(graph, backend="numba")
    fetches = [h, *grads]
    names = {op.name for group in fused_groups_of(session, fetches, [x, w]) for op in group.ops}
    assert any(name.startswith("while/") and "cond" not in name for name in names)    # forward body
    assert any(name.startswith("gradients/") for name in names)                      # backward body
    assert not any("cond/" in name for name in names)          # guarded ops are not fused
    for _ in range(2):
        feeds = {x: rng.standard_normal((3, 5)).astype(np.float32),
                 w: rng.standard_normal((5, 5)).astype(np.float32) * 0.3}
        assert_backends_agree(graph, fetches, feeds, rtol=1e-5, atol=1e-6)


def test_static_sin_and_cos_beyond_their_fast_range_are_exact(rng):
    # float32 sin/cos are within 1 ulp up to 1024; a loop that meets a larger or non-finite
    # argument computes again with np.sin/np.cos.
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4, 5], name="x")
        y = gr.sin(x * 2.0) + gr.cos(x)
    session = gr.Session(graph, backend="numba")
    (group,) = fused_groups_of(session, [y], [x])
    assert "big = big |" in codegen.generate_static_source(group, codegen.static_states(group))
    small = rng.uniform(-1000, 1000, (4, 5)).astype(np.float32)
    large = small.copy()
    large[1, 2], large[3, 0], large[0, 4] = 3e3, np.inf, np.nan
    for value in (small, large):
        got = session.run(y, {x: value})
        want = run(graph, [y], {x: value}, "numpy")[0]
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, equal_nan=True)


def test_a_large_group_is_split_over_threads_with_the_same_result(rng, monkeypatch):
    from gradreg.backends.numba import kernels as fused_kernels
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [300, 1000], name="x")
        y = gr.tanh(x * 0.5 + 1.0) * gr.sigmoid(x) - gr.cos(x)
    value = rng.standard_normal((300, 1000)).astype(np.float32)
    want = run(graph, [y], {x: value}, "numpy")[0]
    calls, lingers = [], []
    original = fused_kernels.workers.parallel

    def counted(fn, parts, threads=None, linger=None):
        calls.append(threads)
        lingers.append(linger)
        return original(fn, parts, threads, linger)
    monkeypatch.setattr(fused_kernels.threads, "threads_for", lambda work, per_thread: 3)
    monkeypatch.setattr(fused_kernels.workers, "parallel", counted)
    got = gr.Session(graph, backend="numba").run(y, {x: value})
    assert calls == [3]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    # 300k elements by 7 ops: under LONG_LOOP_WORK, the pool's short spin; a longer loop lingers
    assert fused_kernels.LONG_LOOP_WORK > 300 * 1000 * 7 and lingers == [None]
    monkeypatch.setattr(fused_kernels, "LONG_LOOP_WORK", 1)
    assert np.allclose(gr.Session(graph, backend="numba").run(y, {x: value}), want, rtol=2e-6, atol=1e-6)
    assert lingers == [None, fused_kernels.workers.LONG_LINGER_SECONDS]


def test_compile_cost_is_bounded_long_chains_split_and_a_budget_per_plan(monkeypatch):
    """Issue 16: fusion compile time grew faster than the group, and a 20,000-op chain never
    finished compiling. Groups stop at MAX_GROUP_OPS ops; past MAX_FUSED_OPS per plan, NumPy."""
    monkeypatch.setattr(grouping, "MAX_FUSED_OPS", 150)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [16], name="x")
        y = x
        for i in range(400):
            y = gr.sigmoid(y) if i % 2 else y * (1.0 + i * 1e-4)
    items = plan_items([y], [x])
    sizes = [len(g.ops) for g in groups(items)]
    assert max(sizes) == grouping.MAX_GROUP_OPS
    assert sum(sizes) == 150
    assert sum(isinstance(item, Operation) and item.type != "Const" for item in items) == 400 - 150
    assert_backends_agree(graph, [y], {x: np.linspace(-2, 2, 16, dtype=np.float32)}, rtol=1e-4)


@pytest.mark.parametrize("batch", [4, None])
def test_a_batch_norm_after_a_bias_is_one_group(rng, batch, monkeypatch):
    """A convolution's BiasAdd, then a batch norm written out with (1, 1, 1, C) scale and shift
    (Keras' ResNet50 as TensorFlow exports it) and the ReLU: one group, one pass. With the batch
    static the shapes are compiled in; without, the general loop indexes the (1, 1, 1, C) values
    as rows."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [batch, 3, 5, 6], name="x")
        b = gr.placeholder(gr.float32, [6], name="b")
        gamma = gr.placeholder(gr.float32, [1, 1, 1, 6], name="gamma")
        beta = gr.placeholder(gr.float32, [1, 1, 1, 6], name="beta")
        biased = gr.nn.bias_add(x, b)
        y = gr.nn.relu(biased * gamma + beta)
    (group,) = groups(plan_items([y, biased], [x, b, gamma, beta]))
    assert [op.type for op in group.ops] == ["BiasAdd", "Mul", "AddV2", "Relu"]
    assert set(group.outputs) == {y, biased}
    session = gr.Session(graph, backend="numba")
    (planned,) = fused_groups_of(session, [y, biased], [x, b, gamma, beta])
    monkeypatch.setenv("GRADREG_JIT", "eager")     # the general kernel's loops built as it meets them
    built = planned.kernel.build()
    assert built.__name__ == "run" if batch else isinstance(built, kernels._GroupKernel)
    if batch:
        states = codegen.static_states(planned)
        assert states[gamma] == states[beta] == states[b] == codegen.ROW
        assert "a2[0, 0, 0, i3]" in codegen.generate_static_source(planned, states)
    values = {b: rng.standard_normal(6).astype(np.float32), gamma: rng.standard_normal((1, 1, 1, 6)).astype(np.float32),
              beta: rng.standard_normal((1, 1, 1, 6)).astype(np.float32)}
    for _ in range(2):      # the second call takes the general kernel's cached path
        values[x] = rng.standard_normal((4, 3, 5, 6)).astype(np.float32)
        got = built(*[values[t] for t in planned.inputs])
        want_biased = values[x] + values[b]
        want = np.maximum(want_biased * values[gamma] + values[beta], 0)
        by_output = dict(zip(planned.outputs, got))
        assert by_output[y].shape == want.shape and by_output[biased].shape == want_biased.shape
        np.testing.assert_allclose(by_output[y], want, rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(by_output[biased], want_biased, rtol=2e-6, atol=1e-6)
    if not batch:
        assert built.last is not None      # the compiled loop ran (not the NumPy kernels)
    assert_backends_agree(graph, [y, biased], values)


def test_rows_of_leading_ones_broadcast_as_numpy_does(rng):
    """The general loop takes a (1, 1, C) row beside (C,) values only when NumPy would give the
    same shapes; a (N, 1, C) value (not a row) and a row-only op keep NumPy's results."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, None, name="x")
        r = gr.placeholder(gr.float32, None, name="r")
        s = gr.placeholder(gr.float32, None, name="s")
        y = gr.tanh(x * r) + s
    session = gr.Session(graph, backend="numba")
    for rs, ss in [((1, 1, 4), (1, 1, 4)), ((1, 1, 4), (4,)), ((2, 1, 4), (1, 1, 4)), ((1, 1, 4), (1, 1, 1)),
                   ((1, 1, 4), (1, 1, 4))]:
        feeds = {x: rng.standard_normal((2, 3, 4)).astype(np.float32),
                 r: rng.standard_normal(rs).astype(np.float32), s: rng.standard_normal(ss).astype(np.float32)}
        got = session.run(y, feeds)
        want = run(graph, y, feeds, "numpy")
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    # rows alone: the output keeps the rows' own shape
    feeds = {x: rng.standard_normal((1, 1, 4)).astype(np.float32), r: rng.standard_normal((1, 1, 4)).astype(np.float32),
             s: rng.standard_normal(4).astype(np.float32)}
    got = session.run(y, feeds)
    assert got.shape == (1, 1, 4)
    np.testing.assert_allclose(got, run(graph, y, feeds, "numpy"), rtol=2e-6, atol=1e-6)


def test_a_bias_add_not_channels_last_or_with_a_scalar_bias_is_not_fused(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [2, 3, 4, 5], name="x")
        b = gr.placeholder(gr.float32, [3], name="b")
        nchw = gr.nn.relu(gr.nn.bias_add(x, b, data_format="NCHW"))
    assert not any(op.type == "BiasAdd" for g in groups(plan_items([nchw], [x, b])) for g_op in [g] for op in g.ops)
    feeds = {x: rng.standard_normal((2, 3, 4, 5)).astype(np.float32), b: rng.standard_normal(3).astype(np.float32)}
    assert_backends_agree(graph, [nchw], feeds)
    from gradreg.backends.numba.description import accept_arrays
    assert accept_arrays((False, False)) and not accept_arrays((False, True))


def test_a_group_writes_into_an_input_the_plan_hands_over(rng, monkeypatch):
    """A fused group whose input dies at it (its last reader, nothing else holding it) writes its
    output into that input's memory, as TensorFlow's kernels forward an input buffer: no new
    array, no page faults for it. An input read again later, fetched or fed is left
    alone, and every value is the NumPy plan's."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [32, 64], name="x")
        w = gr.placeholder(gr.float32, [64, 64], name="w")
        h, products = x, []
        for i in range(6):
            m = gr.matmul(h, w)
            products.append(m)
            h = gr.nn.relu(m * 0.5 + 0.1)
            if i == 4:
                h = h + products[1]       # a product read by two groups: the first must not take it
        y = gr.reduce_sum(h)
    feeds = {x: rng.standard_normal((32, 64)).astype(np.float32),
             w: (rng.standard_normal((64, 64)) / 8).astype(np.float32)}
    want = run(graph, [y], feeds, "numpy")[0]
    allocated = []
    empty = np.empty

    def counted(shape, dtype=float, **kwargs):
        if shape == (32, 64):
            allocated.append(shape)
        return empty(shape, dtype, **kwargs)
    monkeypatch.setattr(np, "empty", counted)      # before the kernels are built: they bind it
    monkeypatch.setenv("GRADREG_SIDE_TASKS", "off")
    plan = gr.Session(graph, backend="numba").plan_for([y], [x, w])
    assert plan._compiled.source.count(" := None)[0]") >= 4    # the groups after the last five products
    plan.build_upgrades()
    plan._tier_up = None
    for _ in range(3):
        allocated.clear()
        (got,) = plan([feeds[x], feeds[w]])
        np.testing.assert_allclose(got, want, rtol=1e-5)
        # the first group reading products[1] allocates; the others are handed their product
        assert len(allocated) == 1, allocated
    assert kernels._HANDED is not None


def test_a_handed_over_input_is_taken_only_when_nothing_else_holds_it(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4, 6], name="x")
        y = gr.tanh(x * 2.0)
    session = gr.Session(graph, backend="numba")
    (group,) = fused_groups_of(session, [y], [x])
    built = group.kernel.build()
    assert built.__name__ == "run"
    assert group.inputs[0] is x
    two = np.float32(2.0)
    scope: dict = {"built": built}
    args = ", ".join(["(a, a := None)[0]"] + ["two"] * (len(group.inputs) - 1))
    exec(f"def hand_over(a, two):\n    return built({args})\n", scope)
    hand_over = scope["hand_over"]
    value = rng.standard_normal((4, 6)).astype(np.float32)
    want = np.tanh(value * 2)
    address = value.ctypes.data
    out = hand_over((value, value := None)[0], two)
    assert out.ctypes.data == address
    np.testing.assert_allclose(out, want, rtol=2e-6)
    # held elsewhere (a variable, a view, a read-only constant): a new array
    value = rng.standard_normal((4, 6)).astype(np.float32)
    for held in (value, value[:2], None):
        if held is None:
            value.flags.writeable = False
        out = hand_over(value, two)
        assert out.ctypes.data != value.ctypes.data
        np.testing.assert_allclose(out, np.tanh(value * 2), rtol=2e-6)


@pytest.mark.skipif(not native.available(), reason="native kernels are unavailable here")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_of_every_length_give_every_element_once(rng, dtype):
    """Native loops over rows (native.fused._elements): rows of a few elements to more than
    the vectorized loop's pass, odd row counts, a bool row, and the rows cut into pieces as
    threads take them give NumPy's values, in the static and the general loops."""
    for channels in (2, 3, 10, 16, 40, 127, 128, 130):
        for rows in (1, 7, 13, 50):
            graph = gr.Graph()
            with graph.as_default():
                x = gr.placeholder(dtype, [rows, channels], name="x")
                r = gr.placeholder(dtype, [channels], name="r")
                s = gr.placeholder(dtype, [channels], name="s")
                m = gr.placeholder(gr.bool_, [channels], name="m")
                y = gr.tanh((x - r) * s) * x
                z = gr.logical_and(x > r, m)
            session = gr.Session(graph, backend="numba")
            values = {x: rng.standard_normal((rows, channels)).astype(dtype),
                      r: rng.standard_normal(channels).astype(dtype),
                      s: rng.standard_normal(channels).astype(dtype), m: rng.random(channels) < 0.5}
            for fetch, want in ((y, np.tanh((values[x] - values[r]) * values[s]) * values[x]),
                                (z, (values[x] > values[r]) & values[m])):
                (group,) = fused_groups_of(session, [fetch], [x, r, s, m])
                assert set(group.inputs) <= {x, r, s, m} and group.outputs == [fetch]
                args = [values[t] for t in group.inputs]
                state = codegen.static_states(group)
                loop = native_fused.static_loop(group, state)
                general = kernels._Variant.build(group, tuple(state[t] for t in group.inputs))
                assert general.loop is native_fused.general_loop(group, state)
                cuts = sorted({0, rows // 3, rows // 2 + 1, rows})
                for pieces in ([(0, rows)], list(zip(cuts, cuts[1:]))):
                    out = np.full((rows, channels), np.nan if want.dtype != bool else True, want.dtype)
                    for lo, hi in pieces:
                        loop(lo, hi, channels, *args, out)
                    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
                out = np.full(rows * channels, np.nan if want.dtype != bool else True, want.dtype)
                general.loop(rows * channels, channels, *[a.reshape(-1) for a in args], out)
                np.testing.assert_allclose(out.reshape(rows, channels), want, rtol=1e-6, atol=1e-6)


def _plan_sums(session, fetches, feeds):
    """The fused groups of the session's plan for ``fetches`` and the Sum nodes it runs apart."""
    plan = session.plan_for(fetches, feeds)
    items = list({id(i): i for i in plan._compiled.line_ops.values()}.values())
    apart = [i for i in items if isinstance(i, Operation) and i.type == "Sum"]
    return [i for i in items if isinstance(i, kernels.FusedGroup)], apart


@pytest.mark.skipif(not native.available(), reason="native kernels are unavailable here")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sum_over_leading_axes_is_taken_into_the_group(rng, dtype, monkeypatch):
    """A value only a Sum over its leading axes reads (a batch norm's gradient) is summed in
    the group's loop, row by row, and never written: with keep_dims or not, rows of every
    length up to the longest summed, the rows split over threads (each piece summing its own), a
    loop run twice (float32 sin beyond its fast range) summing once, and numba's loop (where
    there is no native one) writing the value for the wrapper to sum."""
    for channels in (2, 3, 12, 131, native_fused.SUMMED_ROW_MAX):
        graph = gr.Graph()
        with graph.as_default():
            x = gr.placeholder(dtype, [4, 5, 6, channels], name="x")
            r = gr.placeholder(dtype, [channels], name="r")
            y = gr.sin(x * r) + 1.0
            s1 = gr.reduce_sum(y * x, axis=[0, 1, 2])
            s2 = gr.reduce_sum(y, axis=[0, 1, 2], keepdims=True)
            out = y * r
        fetches = [s1, s2, out]
        session = gr.Session(graph, backend="numba")
        (group,), apart = _plan_sums(session, fetches, [x, r])
        assert not apart and {a.tensor for a in group.sums.values()} == {s1, s2}
        assert set(group.outputs) == {s1, s2, out}
        built = group.kernel.build()
        assert built.__name__ == "run" and built.__globals__["fused"] is native_fused.static_loop(
            group, codegen.static_states(group))
        for scale in (1.0, 3000.0):        # 3000: sin's float32 polynomial is out of range
            values = {x: (rng.standard_normal((4, 5, 6, channels)) * scale).astype(dtype),
                      r: rng.standard_normal(channels).astype(dtype)}
            want = dict(zip(group.outputs, run(graph, group.outputs, values, "numpy")))
            for split, native_loop in ((1, True), (3, True), (3, False)):
                monkeypatch.setattr(kernels.threads, "threads_for", lambda work, per_thread, n=split: n)
                monkeypatch.setattr(kernels, "WORK_PER_THREAD", 1)
                if not native_loop:     # numba's loop writes the value; the wrapper sums it
                    monkeypatch.setattr(kernels, "_native", lambda form, group, state: None)
                fresh = _static_for(group)
                assert (fresh.__globals__["fused"] is native_fused.static_loop(
                    group, codegen.static_states(group))) == native_loop
                got = fresh(*[values[t] if t in values else t.dtype.storage.type(constant_value(t))
                              for t in group.inputs])
                # (a sum's rounding error grows with its terms, the largest of which bounds it)
                largest = max(float(np.abs(w).max()) for w in want.values())
                tolerance = 1e-5 if dtype == np.float32 else 1e-12
                for t, g in zip(group.outputs, got):
                    assert g.shape == tuple(t.shape.as_list()) and g.dtype == dtype
                    np.testing.assert_allclose(g, want[t], rtol=tolerance, atol=tolerance * largest)
                monkeypatch.undo()
        # the plan's own run (its kernel is Tiered: NumPy's, then the loop) agrees too
        assert_backends_agree(graph, fetches, values, rtol=1e-5, atol=1e-5 * largest)
    # a group without a static loop (here: none, as if a value's pattern had none) leaves the Sums apart
    monkeypatch.setattr(kernels, "static_states", lambda group: None)
    (group,), apart = _plan_sums(gr.Session(graph, backend="numba"), fetches, [x, r])
    assert not group.sums and {op.outputs[0] for op in apart} == {s1, s2}
    assert_backends_agree(graph, fetches, values, rtol=1e-5, atol=1e-5 * largest)


def _static_for(group):
    """The group's static kernel built again (WORK_PER_THREAD as the test set it)."""
    general = kernels._GroupKernel(group)
    return kernels._static_kernel(group, codegen.static_states(group), general)


@pytest.mark.skipif(not native.available(), reason="native kernels are unavailable here")
def test_a_sum_stays_apart_when_its_value_is_needed_or_it_is_not_over_leading_axes(rng):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4, 6, 8], name="x")
        wide = gr.placeholder(gr.float32, [2, 3, native_fused.SUMMED_ROW_MAX + 1], name="wide")
        y = gr.tanh(x) * x + 1.0
        fetched = gr.tanh(x) - x
        cases = {
            "also read elsewhere": (gr.reduce_sum(y, axis=[0, 1]), gr.matmul(gr.reshape(y, [24, 8]), gr.ones([8, 2]))),
            "fetched": (gr.reduce_sum(fetched, axis=[0]), fetched),
            "trailing axes": (gr.reduce_sum(gr.exp(x) * x, axis=[1, 2]),),
            "every axis": (gr.reduce_sum(gr.sigmoid(x) * x, axis=[0, 1, 2]),),
            "a row too long": (gr.reduce_sum(gr.exp(wide) * wide, axis=[0, 1]),),
        }
    values = {x: rng.standard_normal((4, 6, 8)).astype(np.float32),
              wide: rng.standard_normal((2, 3, native_fused.SUMMED_ROW_MAX + 1)).astype(np.float32)}
    for what, fetches in cases.items():
        session = gr.Session(graph, backend="numba")
        found, apart = _plan_sums(session, list(fetches), [x, wide])
        assert len(apart) == 1 and not any(g.sums for g in found), what
        assert_backends_agree(graph, list(fetches), values, rtol=1e-5, atol=1e-5)
