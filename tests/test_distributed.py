"""gradreg.distributed on Dask LocalClusters: the same gradients and the same trained model as one process,
the graph shipped once, a worker killed mid-step survived, and a worker's graph error reported as such.

Most tests use a cluster of threads (processes=False) for speed; the process cluster covers what
needs real processes: pickling between them, a killed worker, a worker without the driver's plugin.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import FeedError, GradientError, GradregError

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

from gradreg.distributed import (  # noqa: E402
    BatchPinnedError,
    ClusterError,
    DataParallel,
    add_dask_arguments,
    free_batch,
    run_distributed_grad,
    thaw_constants,
)
from gradreg.distributed.sharding import split_feeds  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def threads_client():
    with distributed.LocalCluster(n_workers=3, processes=False, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def process_client():
    # No second chances for a task whose worker died: a killed worker then fails the step, and the
    # test sees DataParallel's own retry (with the default, Dask reruns the task by itself first).
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                     dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        yield client


def regression_graph(reduce=gr.reduce_mean) -> gr.Graph:
    """float64 two-layer regression with an unsplit feed ("scale") and a variable the loss does not read."""
    graph = gr.Graph()
    graph.seed = 7
    with graph.as_default():
        x = gr.placeholder(gr.float64, [None, 3], name="x")
        y = gr.placeholder(gr.float64, [None], name="y")
        scale = gr.placeholder(gr.float64, [], name="scale")
        w1 = gr.get_variable("w1", [3, 4], dtype=gr.float64)
        b1 = gr.get_variable("b1", [4], dtype=gr.float64, initializer=gr.constant_initializer(0.1))
        w2 = gr.get_variable("w2", [4, 1], dtype=gr.float64)
        gr.get_variable("unused", [2], dtype=gr.float64)
        h = gr.tanh(gr.matmul(x, w1) + b1)
        pred = gr.reshape(gr.matmul(h, w2), [-1])
        reduce(gr.square(pred * scale - y), name="loss")
    return graph


def batch(seed: int, n: int = 10) -> dict:
    rng = np.random.default_rng(seed)
    return {"x:0": rng.normal(size=(n, 3)), "y:0": rng.normal(size=n), "scale:0": np.float64(1.5)}


class SingleProcess:
    """The reference: the same GraphDef bytes, differentiated and trained in one Session."""

    def __init__(self, data: bytes, optimizer=None):
        self.graph = gr.load_graph(data)
        found = {v.op.name: v for v in gr.train.find_variables(self.graph)}
        self.xs = [found[n] for n in ("w1", "b1", "w2")]
        self.loss = self.graph.get_tensor("loss:0")
        with self.graph.as_default():
            self.grads = gr.gradients(self.loss, self.xs)
            if optimizer is not None:
                self.train_op = optimizer.minimize(self.loss, var_list=self.xs,
                                                   global_step=gr.train.get_or_create_global_step())
            init = gr.global_variables_initializer()
        self.session = gr.Session(self.graph, backend="numpy")
        self.session.run(init)

    def values(self) -> list:
        return self.session.run(self.xs)


def test_shards_of_an_uneven_batch_are_weighted_by_their_share_of_it():
    feeds = {"x": np.arange(20.0).reshape(10, 2), "t": np.arange(30.0).reshape(3, 10), "lr": 0.5}
    common, shards = split_feeds(feeds, {"x:0": 0, "t:0": 1}, 3, "mean")
    assert list(common) == ["lr:0"]
    assert [s.size for s in shards] == [3, 4, 3]
    assert [s.weight for s in shards] == [0.3, 0.4, 0.3]
    np.testing.assert_array_equal(np.concatenate([s.feeds["t:0"] for s in shards], axis=1), feeds["t"])
    np.testing.assert_array_equal(np.concatenate([s.feeds["x:0"] for s in shards]), feeds["x"])
    _, summed = split_feeds(feeds, ["x:0", "t:0=1"], 4, "sum")
    assert [s.weight for s in summed] == [1.0] * 4
    _, few = split_feeds({"x": np.ones((2, 1))}, None, 5, "mean")   # never an empty shard
    assert [s.size for s in few] == [1, 1]


def test_split_feeds_that_disagree_or_are_missing_are_feed_errors():
    with pytest.raises(FeedError, match=r"disagree on the batch size \('x:0': 4, 'y:0': 5\)"):
        split_feeds({"x": np.ones((4, 2)), "y": np.ones(5)}, None, 2, "mean")
    with pytest.raises(FeedError, match="split names 'z:0', which is not among the feeds"):
        split_feeds({"x": np.ones((4, 2))}, ["z"], 2, "mean")
    with pytest.raises(GradregError, match="reduction 'avg'"):
        split_feeds({"x": np.ones((4, 2))}, None, 2, "avg")


@pytest.mark.parametrize("reduce, reduction", [(gr.reduce_mean, "mean"), (gr.reduce_sum, "sum")])
def test_gradients_equal_the_single_process_full_batch_gradients(threads_client, reduce, reduction):
    graph = regression_graph(reduce)
    dp = DataParallel(graph, loss="loss", client=threads_client, split=["x:0", "y:0"], reduction=reduction,
                      backend="numpy")
    dp.initialize()
    assert dp.shards == 3 and [x.op.name for x in dp.xs] == ["w1", "b1", "w2"]
    reference = SingleProcess(dp.graph_bytes)
    for seed, size in [(0, 10), (1, 7), (2, 2)]:     # 4+3+3, 3+2+2 and 1+1 examples per shard
        feeds = batch(seed, size)
        (loss,), grads = dp.loss_and_gradients(feeds)
        want_loss, want = reference.session.run([reference.loss, reference.grads], feeds)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-13)
        for got, expected in zip(grads, want):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert dp.last_step["shards"] == 2 and dp.last_step["levels"] == 1


def test_a_graph_with_plain_tensor_xs_and_no_variables(threads_client):
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [None, 3], name="x")
        w = gr.constant(np.linspace(-1, 1, 6).reshape(3, 2), name="w")
        gr.reduce_mean(gr.sin(gr.matmul(x, w)), name="loss")
        (want,) = gr.gradients(graph.get_tensor("loss:0"), [w])
    feeds = {"x:0": np.random.default_rng(3).normal(size=(9, 3))}
    (got,) = DataParallel(graph, xs=["w"], client=threads_client, backend="numpy").gradients(feeds)
    np.testing.assert_allclose(got, gr.Session(graph, backend="numpy").run(want, feeds), rtol=1e-12)


def test_training_equals_single_process_training_and_checkpoints_resume(threads_client, tmp_path):
    graph = regression_graph()
    batches = [batch(seed) for seed in range(4)]
    dp = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy")
    reference = SingleProcess(dp.graph_bytes, gr.train.AdamOptimizer(0.05))
    want_losses = [float(reference.session.run([reference.loss, reference.train_op], b)[0]) for b in batches]
    seen = []
    losses = dp.train(gr.train.AdamOptimizer(0.05), batches, steps=4, checkpoint_dir=str(tmp_path),
                      checkpoint_every=2, progress=False, callback=lambda step, loss: seen.append(step))
    assert seen == [1, 2, 3, 4] and dp.global_step == 4
    np.testing.assert_allclose(losses, want_losses, rtol=1e-12)
    for got, want in zip(dp.session.run(dp.xs), reference.values()):
        np.testing.assert_allclose(got, want, rtol=1e-11)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-2.npz", "model-4.npz"]
    # The checkpoint holds what single-process training saves (variables, Adam slots, global step).
    single = SingleProcess(dp.graph_bytes, gr.train.AdamOptimizer(0.05))
    gr.train.Saver().restore(single.session, str(tmp_path / "model-2.npz"))
    single.session.run(single.train_op, batches[2])
    resumed = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy")
    os.unlink(tmp_path / "model-4.npz")
    os.unlink(tmp_path / "checkpoint")
    gr.train.Saver().save(single.session, str(tmp_path / "model"), global_step=3)
    resumed.train(gr.train.AdamOptimizer(0.05), batches[3:], steps=1, checkpoint_dir=str(tmp_path), resume=True,
                  progress=False)
    assert resumed.global_step == 4
    for got, want in zip(resumed.session.run(resumed.xs), reference.values()):
        np.testing.assert_allclose(got, want, rtol=1e-11)


def test_the_graph_travels_once_and_each_worker_compiles_it_once(threads_client):
    graph = regression_graph()
    with graph.as_default():   # 400 kB the loss never reads: the graph outweighs any step's traffic
        gr.constant(np.zeros(50_000), name="ballast")
    dp = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy")
    dp.initialize()
    assert len(dp.graph_bytes) > 400_000 and dp.plugin_name.startswith(f"gradreg-graph-{dp.digest}-")

    def transfers(dask_worker):
        return [entry["total"] for entry in dask_worker.transfer_outgoing_log]
    before = threads_client.run(transfers)
    for seed in range(3):
        dp.gradients(batch(seed))
    after = threads_client.run(transfers)
    moved = [size for address in after for size in after[address][len(before[address]):]]
    assert moved and sum(moved) < 30_000          # the summed gradients moved, the graph did not

    def held(dask_worker, spec=dp.spec):
        plugin = dask_worker.plugins[spec.plugin]
        return len(plugin.graph_bytes), list(plugin.entries) == [spec]
    assert list(threads_client.run(held).values()) == [(len(dp.graph_bytes), True)] * 3
    dp.close()
    assert all(dp.plugin_name not in names for names in threads_client.run(
        lambda dask_worker: list(dask_worker.plugins)).values())


def test_a_worker_side_gradreg_error_arrives_as_itself(threads_client):
    dp = DataParallel(regression_graph(), client=threads_client, split=["x:0", "y:0"], backend="numpy")
    dp.initialize()
    bad = dict(batch(0), **{"x:0": np.ones((10, 5))})
    with pytest.raises(FeedError, match=r"x:0.*\(on dask worker "):
        dp.gradients(bad)


def test_uninitialized_unconnected_and_unknown_names_are_typed_errors(threads_client):
    graph = regression_graph()
    dp = DataParallel(graph, xs=["w1", "unused"], client=threads_client, split=["x:0", "y:0"], backend="numpy")
    with pytest.raises(GradregError, match=r"uninitialized value (w[12]|unused) .*DataParallel.initialize\(\)"):
        dp.gradients(batch(0))
    dp.initialize()
    grads = dp.gradients(batch(0))
    assert grads[0].shape == (3, 4) and grads[1] is None
    with pytest.raises(GradientError, match="no gradient for variable.*unused"):
        dp.train(gr.train.GradientDescentOptimizer(0.1), [batch(0)], steps=1, progress=False)
    with pytest.raises(GradregError, match="xs: 'nope' names no tensor or variable"):
        DataParallel(graph, xs=["nope"], client=threads_client)
    with pytest.raises(GradregError, match=r"loss 'x:0' has shape \(\?, 3\): data-parallel gradients need a scalar"):
        DataParallel(graph, loss="x:0", xs=["w1"], client=threads_client)


def test_the_command_line_evaluates_gradients_on_a_scheduler(threads_client, tmp_path):
    parser = argparse.ArgumentParser()
    for flag in ("graph", "--ys", "--xs", "--grad-ys", "--stop"):
        parser.add_argument(flag)
    parser.add_argument("--unconnected", default="none")
    add_dask_arguments(parser)
    address = threads_client.scheduler.address
    args = parser.parse_args(["g.pb", "--ys", "loss", "--xs", "w", "--dask", address, "--split", "x:0"])
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [None, 2], name="x")
        w = gr.constant(np.array([[0.5, -1.0], [2.0, 0.25]]), name="w")
        gr.reduce_mean(gr.exp(gr.matmul(x, w)), name="loss")
    feeds = {"x:0": np.random.default_rng(5).normal(size=(5, 2))}
    ys, grads = run_distributed_grad(args, graph, feeds)
    with graph.as_default():
        (want,) = gr.gradients(graph.get_tensor("loss:0"), [w])
    want_loss, want_grad = gr.Session(graph, backend="numpy").run(["loss:0", want], feeds)
    assert list(ys) == ["loss:0"] and list(grads) == ["w:0"]
    np.testing.assert_allclose(ys["loss:0"], want_loss, rtol=1e-13)
    np.testing.assert_allclose(grads["w:0"], want_grad, rtol=1e-12)
    local = parser.parse_args(["g.pb", "--ys", "loss", "--xs", "w", "--dask", "local:1", "--reduction", "mean"])
    assert local.dask == 1 and local.relax_batch is True
    assert parser.parse_args(["g.pb", "--ys", "loss", "--xs", "w", "--no-relax-batch"]).relax_batch is False
    environment = dict(os.environ)
    ys, grads = run_distributed_grad(local, graph, feeds)       # one worker process, started and stopped here
    np.testing.assert_allclose(grads["w:0"], want_grad, rtol=1e-12)
    assert dict(os.environ) == environment     # Dask's nanny sets OMP_NUM_THREADS=1 & co. here: put back
    for bad in (["--dask", "local:0"], ["--dask", "nowhere"], ["--split", ","]):
        with pytest.raises(SystemExit):
            parser.parse_args(["g.pb", "--ys", "loss", "--xs", "w", *bad])


def test_gradreg_grad_with_dask_prints_what_the_single_process_command_prints(threads_client, tmp_path, capsys):
    """`gradreg grad ... --dask SCHEDULER --split x:0`, wired into gradreg/cli.py: the same ys and
    gradients as the command without --dask."""
    from gradreg.cli import main
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [None, 2], name="x")
        w = gr.constant(np.array([[0.5, -1.0], [2.0, 0.25]]), name="w")
        gr.reduce_mean(gr.tanh(gr.matmul(x, w)), name="loss")
    gr.save_graph(graph, str(tmp_path / "g.pb"))
    np.savez(tmp_path / "batch.npz", **{"x:0": np.random.default_rng(3).normal(size=(7, 2))})
    # --threshold 1: arrays as one min/max/mean line (the sums of shards differ in the last digits)
    common = [str(tmp_path / "g.pb"), "--ys", "loss", "--xs", "w", "--feed", str(tmp_path / "batch.npz"),
              "--threshold", "1"]
    assert main(["grad", *common, "-o", str(tmp_path / "one.pb")]) == 0
    alone = capsys.readouterr().out.splitlines()
    address = threads_client.scheduler.address
    assert main(["grad", *common, "-o", str(tmp_path / "dp.pb"), "--dask", address, "--split", "x:0"]) == 0
    spread = capsys.readouterr().out.splitlines()
    assert len(alone) == 3 and spread[:2] == alone[:2]          # loss, d/dw; then "wrote ..."
    assert "mean=" in alone[1]


def test_gradients_on_worker_processes_equal_the_single_process_ones(process_client):
    dp = DataParallel(regression_graph(), client=process_client, split=["x:0", "y:0"], backend="numpy")
    dp.initialize()
    reference = SingleProcess(dp.graph_bytes)
    feeds = batch(11, 9)
    for got, want in zip(dp.gradients(feeds), reference.session.run(reference.grads, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_a_worker_without_the_graphs_plugin_reports_the_graph_error(process_client, tmp_path):
    """The driver has the swish plugin installed, the workers do not: the worker's error (its
    gradients reach an op type it does not know: NoGradientError naming the node and the plugin
    that provides it) reaches the driver as that class with that text, not as a pickling traceback."""
    info = tmp_path / "gradreg_swish-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gradreg-swish\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[gradreg.plugins]\nswish = gradreg_swish:family\n")
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent("""
        import json, sys
        import numpy as np
        import gradreg as gr
        from distributed import Client
        from gradreg.distributed import DataParallel
        graph = gr.Graph()
        with graph.as_default():
            x = gr.placeholder(gr.float64, [None, 2], name="x")
            w = gr.constant(np.ones((2, 2)), name="w")
            gr.reduce_mean(gr.swish(gr.matmul(x, w), name="act"), name="loss")
        with Client(sys.argv[1]) as client:
            dp = DataParallel(graph, xs=["w"], client=client, backend="numpy")
            try:
                dp.gradients({"x": np.ones((4, 2))})
            except Exception as exc:
                print(json.dumps({"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)}))
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO / "plugins" / "gradreg-swish")]))
    done = subprocess.run([sys.executable, str(driver), process_client.scheduler.address], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["type"] == "NoGradientError" and report["module"] == "gradreg.errors"
    assert "node 'act' (op Swish)" in report["message"] and "plugin 'swish' provides op type 'Swish'" in \
        report["message"] and "(on dask worker tcp://" in report["message"]


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("scatter", [[], ["--scatter"]], ids=["sent", "scattered"])
def test_the_dask_example_trains_a_tf_written_fixed_batch_graph_to_the_single_process_loss_curve(
        process_client, tmp_path, scatter):
    """examples/mlp/model.pbtxt: TensorFlow wrote it with x [8, 12], labels [8, 5] and its weights as
    Consts (and folded the loss's tf.shape() into Consts [8, 5]); trained on two workers, shards of 4,
    each batch sent with its step or the training set scattered to the workers first."""
    curves = _example("train_dask").main([
        "--graph", str(REPO / "examples" / "mlp" / "model.pbtxt"), "--steps", "8", "--lr", "0.01",
        "--checkpoint-every", "4", "--out", str(tmp_path), "--scheduler", process_client.scheduler.address,
        *scatter])
    single, parallel = curves["single"], curves["parallel"]
    assert len(parallel) == len(single) == 8
    np.testing.assert_allclose(parallel, single, rtol=2e-5)
    assert min(single[4:]) < single[0]            # it learns
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-4.npz", "model-8.npz"]
    with np.load(tmp_path / "model-8.npz") as saved:
        assert {"w1/variable", "b2/variable", "global_step"} <= set(saved.files)


class KillOnShard(distributed.WorkerPlugin):
    """Kills its worker's process the first time any worker starts a shard task (once per marker file)."""

    def __init__(self, marker: str):
        self.marker = marker

    def setup(self, worker):
        self.address = worker.address

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or not str(key).startswith("gradreg-shard-"):
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, self.address.encode())
        os.close(fd)
        os._exit(1)


def test_a_worker_killed_mid_epoch_leaves_the_fault_free_runs_weights_bit_for_bit(process_client, tmp_path):
    """Two worker processes, two shards, steps sent ahead: a worker dies running step 3's shard.
    The other worker's replica carries on, the restarted worker gets a copy, the step runs again,
    and every loss and final weight equals the fault-free run's exactly."""
    graph = regression_graph()
    batches = [batch(seed) for seed in range(6)]

    def run(callback=None):
        dp = DataParallel(graph, client=process_client, split=["x:0", "y:0"], backend="numpy")
        losses = dp.train(gr.train.MomentumOptimizer(0.05, 0.9), batches, steps=6, progress=False,
                          callback=callback)
        return dp, losses, dp.session.run(dp.xs)

    clean, clean_losses, clean_values = run()
    marker = tmp_path / "killed"

    def kill_during_a_later_step(step, loss):
        if step == 2:
            process_client.register_plugin(KillOnShard(str(marker)), name="kill-on-shard")
    try:
        faulty, losses, values = run(kill_during_a_later_step)
    finally:
        process_client.unregister_worker_plugin("kill-on-shard")
    assert marker.read_text().startswith("tcp://")           # a worker died running a shard
    assert faulty.retries >= 1 and clean.retries == 0
    assert faulty.global_step == clean.global_step == 6       # no step lost, none applied twice
    assert losses == clean_losses
    for got, want in zip(values, clean_values):
        np.testing.assert_array_equal(got, want)
    reference = SingleProcess(clean.graph_bytes, gr.train.MomentumOptimizer(0.05, 0.9))
    for b in batches:
        reference.session.run(reference.train_op, b)
    for got, want in zip(values, reference.values()):
        np.testing.assert_allclose(got, want, rtol=1e-11)
    process_client.wait_for_workers(2, timeout=60)   # the nanny restarted the killed worker


def test_one_shard_on_three_workers_trains_as_one_process_bit_for_bit(threads_client):
    """shards=1: every worker runs the whole step (loss, gradients and update in one plan, as
    minimize builds it in one process), tasks of up to three steps; the losses and weights are the
    single-process run's exactly, every replica holds them, and no gradient moves between workers."""
    graph = regression_graph()
    batches = [batch(seed) for seed in range(7)]
    dp = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy", shards=1)
    reference = SingleProcess(dp.graph_bytes, gr.train.AdamOptimizer(0.05))
    want_losses = [float(reference.session.run([reference.loss, reference.train_op], b)[0]) for b in batches]

    def transfers(dask_worker):
        return len(dask_worker.transfer_incoming_log)
    before = threads_client.run(transfers)
    seen = []
    losses = dp.train(gr.train.AdamOptimizer(0.05), batches, steps=7, progress=False, steps_per_task=3, window=1,
                      callback=lambda step, loss: seen.append(step))
    assert seen == list(range(1, 8)) and losses == want_losses and dp.global_step == 7
    assert threads_client.run(transfers) == before
    for got, want in zip(dp.session.run(dp.xs), reference.values()):
        np.testing.assert_array_equal(got, want)
    states = threads_client.run(lambda dask_worker, spec=dp.spec: dask_worker.plugins[spec.plugin].entries[spec].state)
    assert list(states.values()) == [dp.lineage] * 3 and dp.lineage[1] == 7
    sized = threads_client.run(lambda dask_worker, spec=dp.spec: {
        n: s.graph.get_tensor("x:0").shape.as_list()
        for n, s in dask_worker.plugins[spec.plugin].entries[spec].sized.items()})
    assert list(sized.values()) == [{10: [10, 3]}] * 3      # each ran the graph with the batch fixed at 10
    with pytest.raises(GradregError, match="steps_per_task=0"):
        dp.train(gr.train.AdamOptimizer(0.05), batches, steps=1, progress=False, steps_per_task=0)


@pytest.mark.parametrize("resident", [False, True], ids=["sent", "scattered"])
def test_one_shard_survives_a_worker_killed_mid_epoch_bit_for_bit(process_client, resident):
    """shards=1 on two worker processes, each running every step on its replica, calls of two steps
    sent ahead: one worker's process exits while steps 2-5 are in flight. The other replica carries
    on, and every loss and final weight equals the fault-free run's exactly. With scattered data the
    restarted worker gets the arrays again from the scheduler."""
    graph = regression_graph()
    batches = [batch(seed) for seed in range(6)]
    x, y = np.concatenate([b["x:0"] for b in batches]), np.concatenate([b["y:0"] for b in batches])

    def run(callback=None):
        dp = DataParallel(graph, client=process_client, split=["x:0", "y:0"], backend="numpy", shards=1)
        given = batches
        if resident:
            data = dp.scatter({"x:0": x, "y:0": y})
            given = [b.with_feeds({"scale:0": np.float64(1.5)}) for b in data.batches(10, epochs=1)]
        losses = dp.train(gr.train.MomentumOptimizer(0.05, 0.9), given, steps=6, progress=False,
                          callback=callback, steps_per_task=2)
        return dp, losses, dp.session.run(dp.xs)

    clean, clean_losses, clean_values = run()
    process_client.wait_for_workers(2, timeout=60)
    victim = sorted(process_client.scheduler_info()["workers"])[0]

    def kill_a_worker(step, loss):
        if step == 1:
            distributed.fire_and_forget(process_client.submit(os._exit, 1, workers=[victim], pure=False))
    faulty, losses, values = run(kill_a_worker)
    assert victim not in process_client.scheduler_info()["workers"]       # it died
    assert faulty.global_step == clean.global_step == 6 and losses == clean_losses
    for got, want in zip(values, clean_values):
        np.testing.assert_array_equal(got, want)
    process_client.wait_for_workers(2, timeout=60)   # the nanny restarted the killed worker
    if resident:
        names = set(faulty.resident)
        assert all(names <= set(plugins) for plugins in process_client.run(
            lambda dask_worker: list(dask_worker.plugins)).values())


def test_a_replica_asked_again_for_steps_it_applied_skips_them_with_their_losses():
    """A call of steps run again (its answer lost with a worker) finds the replica several steps on:
    those steps are not applied twice, their losses are the ones the replica remembers."""
    from gradreg.distributed.worker import GradientSpec, Replica
    graph = regression_graph()
    spec = GradientSpec(plugin="p", digest="d", ys=("loss:0",), xs=("w1", "b1", "w2"),
                        variables=("w1", "b1", "w2"), backend="numpy")
    replica = Replica(graph.as_graph_def().SerializeToString(), spec)
    blueprint = pickle.dumps(gr.train.GradientDescentOptimizer(0.1))
    replica.update(blueprint)
    with replica.graph.as_default():
        replica.session.run(gr.global_variables_initializer())
    replica.set_state(("l", 0))
    batches = [batch(seed) for seed in range(4)]
    status, losses = replica.steps(blueprint, ("l", 0), batches[:3])
    assert status == "applied" and replica.state == ("l", 3) and len(losses) == 3
    weights = replica.session.run(replica.variables)
    assert replica.steps(blueprint, ("l", 0), batches[:3]) == ("already", losses)
    for got, want in zip(replica.session.run(replica.variables), weights):
        np.testing.assert_array_equal(got, want)
    status, more = replica.steps(blueprint, ("l", 1), batches[1:])
    assert status == "applied" and more[:2] == losses[1:] and replica.state == ("l", 4)
    assert replica.steps(blueprint, ("l", 5), batches[:1]) == ("missing", None)


def test_a_replica_runs_a_graph_sized_to_each_batch_and_the_free_one_past_four_sizes():
    """Each batch size gets the graph with its batch fixed (sharing the replica's variables), up to
    four sizes; a fifth runs on the free graph. Every step equals the free graph's step."""
    from gradreg.distributed.worker import MAX_SIZED, GradientSpec, Replica
    graph = regression_graph()
    data = graph.as_graph_def().SerializeToString()
    blueprint = pickle.dumps(gr.train.MomentumOptimizer(0.05, 0.9))
    replicas = []
    for axes in ((("x:0", 0), ("y:0", 0)), ()):
        spec = GradientSpec(plugin="p", digest="d", ys=("loss:0",), xs=("w1", "b1", "w2"),
                            variables=("w1", "b1", "w2"), backend="numpy", batch_axes=axes)
        replica = Replica(data, spec)
        replica.update(blueprint)
        with replica.graph.as_default():
            replica.session.run(gr.global_variables_initializer())
        replica.set_state(("l", 0))
        replicas.append(replica)
    sized, free = replicas
    batches = [batch(seed, n) for seed, n in enumerate([3, 4, 5, 6, 7, 3, 7])]
    from gradreg.distributed.data import Rows
    assert sized.builds_for(batches[:1]) and not free.builds_for(batches[:1])    # (then not on the event loop)
    for step, feeds in enumerate(batches):
        got, want = sized.step(blueprint, ("l", step), feeds), free.step(blueprint, ("l", step), feeds)
        assert got[0] == want[0] == "applied"
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    assert MAX_SIZED == 4 and sorted(sized.sized) == [3, 4, 5, 6] and free.sized == {}
    assert not sized.builds_for([Rows("d", slice(2, 9))])                         # past four sizes: the free graph
    del sized.sized[6]
    assert sized.builds_for([Rows("d", np.arange(6))]) and not sized.builds_for([Rows("d", slice(0, 5)), batches[0]])
    assert sized.sized[5].graph.get_tensor("x:0").shape.as_list() == [5, 3]
    for got, want in zip(sized.session.run(sized.variables + [sized.updates[blueprint].step]),
                         free.session.run(free.variables + [free.updates[blueprint].step])):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert sized.export_state()["state"] == ("l", 7)


def test_a_restarted_driver_resumes_from_its_checkpoint_to_the_uninterrupted_runs_weights(threads_client, tmp_path):
    """Checkpoints every 2 steps on the driver; the driver dies after step 3 (its DataParallel and
    client gone, the workers' replicas with them); a new client resumes from model-2 and ends
    where the uninterrupted run ends, bit for bit."""
    graph = regression_graph()
    batches = [batch(seed) for seed in range(5)]
    whole = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy")
    want_losses = whole.train(gr.train.AdamOptimizer(0.05), batches, steps=5, progress=False)
    want = whole.session.run(whole.xs)

    class DriverDied(Exception):
        pass

    def die_after_step_3(step, loss):
        if step == 3:
            raise DriverDied
    address = threads_client.scheduler.address
    with distributed.Client(address) as first:
        dp = DataParallel(graph, client=first, split=["x:0", "y:0"], backend="numpy")
        with pytest.raises(DriverDied):
            dp.train(gr.train.AdamOptimizer(0.05), batches, steps=5, checkpoint_dir=str(tmp_path),
                     checkpoint_every=2, progress=False, callback=die_after_step_3, window=0)
        dp.close()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-2.npz"]
    with distributed.Client(address) as second:
        resumed = DataParallel(graph, client=second, split=["x:0", "y:0"], backend="numpy")
        losses = resumed.train(gr.train.AdamOptimizer(0.05), batches[2:], steps=3, checkpoint_dir=str(tmp_path),
                               checkpoint_every=2, resume=True, progress=False)
        assert resumed.global_step == 5
        assert losses == want_losses[2:]
        for got, expected in zip(resumed.session.run(resumed.xs), want):
            np.testing.assert_array_equal(got, expected)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-2.npz", "model-4.npz", "model-5.npz"]


def test_variables_stay_on_the_workers_a_step_moves_shards_and_gradients(threads_client):
    """The driver sends the variables once; then each step's tasks carry a shard, and the workers
    hold replicas that all advance together."""
    dp = DataParallel(regression_graph(), client=threads_client, split=["x:0", "y:0"], backend="numpy")
    pushes = []
    push = dp._push

    def counted():
        pushes.append(1)
        push()
    dp._push = counted
    dp.train(gr.train.GradientDescentOptimizer(0.1), [batch(s) for s in range(4)], steps=4, progress=False)
    assert len(pushes) == 1
    lineage, step = dp.lineage
    assert step == 4
    states = threads_client.run(lambda dask_worker, spec=dp.spec: dask_worker.plugins[spec.plugin].entries[spec].state)
    assert list(states.values()) == [(lineage, 4)] * 3
    assert dp.last_step["shard_bytes"] < 2000 and dp.last_step["result_bytes"] < 1000   # no parameters in either


def test_a_tf_written_graph_with_a_fixed_batch_gives_the_full_batch_gradients_on_three_workers(threads_client):
    """examples/mlp/model.pbtxt (x [8, 12], weights as Consts) split 3+3+2: its batch is freed, the
    Consts TensorFlow folded from tf.shape() become Shape ops, and the gradients are the graph's."""
    path = str(REPO / "examples" / "mlp" / "model.pbtxt")
    with np.load(REPO / "examples" / "mlp" / "inputs.npz") as inputs:
        feeds = dict(inputs)
    dp = DataParallel(path, xs=["w1", "b1", "w2", "b2"], client=threads_client, split=["x:0", "labels:0"],
                      backend="numpy")
    assert dp.batch_report.batch == 8 and dp.batch_report.freed == ["x", "labels"]
    assert dp.batch_report.unpinned == ["softmax_cross_entropy_with_logits/Shape"]
    (loss,), grads = dp.loss_and_gradients(feeds)
    graph = gr.load_graph(path)
    with graph.as_default():
        want = gr.gradients(graph.get_tensor("loss:0"), [graph.get_tensor(f"{n}:0") for n in ("w1", "b1", "w2", "b2")])
    session = gr.Session(graph, backend="numpy")
    want_loss, want_grads = session.run(["loss:0", want], feeds)
    assert dp.last_step["shards"] == 3
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    np.testing.assert_allclose(loss, 1.36951, rtol=1e-5)                 # TensorFlow's value (examples/mlp)
    for got, expected in zip(grads, want_grads):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def test_one_shard_frees_a_fixed_batch_too(threads_client):
    """examples/mlp/model.pbtxt (x [8, 12]) on one shard: the batch is freed as for several, so a
    batch of another size trains too (the frozen MobileNetV2 of bench/dask_cluster.py, batch 8,
    trains at 32 on one worker); the gradients are those of the freed graph in one process."""
    path = str(REPO / "examples" / "mlp" / "model.pbtxt")
    with np.load(REPO / "examples" / "mlp" / "inputs.npz") as inputs:
        feeds = {k: v[:5] for k, v in inputs.items()}
    xs = ["w1", "b1", "w2", "b2"]
    dp = DataParallel(path, xs=xs, client=threads_client, split=["x:0", "labels:0"], backend="numpy", shards=1)
    assert dp.batch_report.batch == 8 and dp.batch_report.freed == ["x", "labels"]
    (loss,), grads = dp.loss_and_gradients(feeds)
    graph = gr.load_graph(path)
    freed_graph_def, _ = free_batch(graph.as_graph_def(), {"x:0": 0, "labels:0": 0})
    freed = gr.load_graph(freed_graph_def.SerializeToString())
    with freed.as_default():
        want = gr.gradients(freed.get_tensor("loss:0"), [freed.get_tensor(f"{n}:0") for n in xs])
    want_loss, want_grads = gr.Session(freed, backend="numpy").run(["loss:0", want], feeds)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    for got, expected in zip(grads, want_grads):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def _pinned_graph() -> gr.Graph:
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [128, 6], name="x")
        w = gr.constant(np.ones((6, 3), np.float32), name="w")
        flat = gr.reshape(x, [128, -1], name="flat")
        gr.reduce_sum(gr.matmul(flat, w), name="loss")
    return graph


def test_a_node_that_pins_the_batch_is_named_with_the_ways_out(threads_client):
    with pytest.raises(BatchPinnedError, match=r"fixes the batch size 128 of 'x:0'.*node 'flat' \(op Reshape\).*"
                                                r"relax_batch=False .*exactly 128 examples"):
        DataParallel(_pinned_graph(), xs=["w"], client=threads_client, split=["x:0"], backend="numpy")
    graph = gr.Graph()
    with graph.as_default():      # a loss divided by the written batch size, as a constant
        x = gr.placeholder(gr.float32, [16, 3], name="x")
        w = gr.constant(np.ones((3, 1), np.float32), name="w")
        gr.div(gr.reduce_sum(gr.matmul(x, w)), gr.constant(16.0, name="batch_size"), name="loss")
    with pytest.raises(BatchPinnedError, match=r"node 'loss' \(op RealDiv\) scales by the constant 'batch_size' = 16"):
        free_batch(graph.as_graph_def(), {"x:0": 0})
    hidden = gr.Graph()
    with hidden.as_default():     # a hidden width equal to the batch size pins nothing
        x = gr.placeholder(gr.float32, [4, 3], name="x")
        h = gr.matmul(x, gr.constant(np.ones((3, 4), np.float32), name="w"))
        gr.reduce_mean(gr.reshape(h, [-1, 4]), name="loss")
    freed, report = free_batch(hidden.as_graph_def(), {"x:0": 0})
    assert report.batch == 4 and report.freed == ["x"] and report.unpinned == []
    assert gr.load_graph(freed.SerializeToString()).get_tensor("x:0").shape.as_list() == [None, 3]


def test_with_relax_batch_off_each_shard_holds_the_written_batch(threads_client):
    graph = _pinned_graph()
    dp = DataParallel(graph, xs=["w"], client=threads_client, split=["x:0"], backend="numpy", relax_batch=False,
                      shards=2)
    x = np.random.default_rng(0).normal(size=(256, 6)).astype(np.float32)
    (loss,), (grad,) = dp.loss_and_gradients({"x:0": x})
    np.testing.assert_allclose(loss, x.sum() * 3 / 2, rtol=1e-5)        # the mean of the two shards' sums
    np.testing.assert_allclose(grad, np.repeat(x.sum(axis=0)[:, None] / 2, 3, axis=1), rtol=1e-5)
    with pytest.raises(FeedError, match=r"each shard must hold 128 examples \(these hold 64\); feed 2 x 128"):
        dp.gradients({"x:0": x[:128]})


def test_a_frozen_keras_model_trains_as_it_is(threads_client):
    """bench/graphs' MobileNetV2 (alpha 0.35, 64x64), frozen by TensorFlow at batch 8: its 158 weight
    Consts become variables, the batch is freed, and SGD steps on 4+4 examples follow the single-process
    run of the graph as written (batch 8)."""
    path = REPO / "bench" / "graphs" / "mobilenet_v2_64" / "forward.pb"
    if not path.exists():
        pytest.skip("bench/graphs/mobilenet_v2_64 is not there")
    import json
    xs = json.loads((path.parent.parent / "manifest.json").read_text())["mobilenet_v2_64"]["xs"][1:]
    graph = gr.load_graph(str(path))
    with graph.as_default():
        labels = gr.placeholder(gr.int32, [None], name="labels")
        probabilities = graph.get_tensor("Identity:0")
        picked = gr.reduce_sum(probabilities * gr.one_hot(labels, 10), axis=1)
        gr.reduce_mean(-gr.log(picked + 1e-7), name="loss")
    dp = DataParallel(graph, xs=xs, client=threads_client, split=["x:0", "labels:0"], shards=2)
    assert dp.batch_report.batch == 8 and len(dp.xs) == 158
    rng = np.random.default_rng(0)
    feeds = {"x:0": rng.uniform(-1, 1, (8, 64, 64, 3)).astype(np.float32), "labels:0": np.arange(8, dtype=np.int32)}
    losses = dp.train(gr.train.GradientDescentOptimizer(0.002), [feeds] * 2, steps=2, progress=False)
    single = gr.load_graph(thaw_constants(graph.as_graph_def(), xs).SerializeToString())
    with single.as_default():
        train_op = gr.train.GradientDescentOptimizer(0.002).minimize(single.get_tensor("loss:0"),
                                                                     var_list=gr.train.find_variables(single))
        init = gr.global_variables_initializer()
    session = gr.Session(single)
    session.run(init)
    want = [float(session.run(["loss:0", train_op], feeds)[0]) for _ in range(2)]
    np.testing.assert_allclose(losses, want, rtol=1e-4)       # the second loss is after the first update
    assert abs(losses[1] - losses[0]) > 0.1


def test_a_cluster_without_workers_and_a_closed_data_parallel_say_so(threads_client):
    dp = DataParallel(regression_graph(), client=threads_client, split=["x:0", "y:0"], backend="numpy")
    dp.initialize()
    dp.close()
    with pytest.raises(GradregError, match="this DataParallel is closed"):
        dp.gradients(batch(0))
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client, \
            pytest.raises(ClusterError, match=r"has no workers \(waited 0.5 s\)"):
        DataParallel(regression_graph(), client=client, backend="numpy", worker_timeout=0.5)


def test_gradreg_grad_with_dask_but_without_dask_installed_says_what_to_install(tmp_path, capsys, monkeypatch):
    """The parser builds without Dask; --dask then fails in one line naming the extra (it was an
    internal ModuleNotFoundError)."""
    import sys

    from gradreg.cli import main
    monkeypatch.setitem(sys.modules, "gradreg.distributed.data_parallel", None)   # import fails as without Dask
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [None, 2], name="x")
        gr.reduce_sum(x * gr.constant(np.ones(2), name="w"), name="loss")
    gr.save_graph(graph, str(tmp_path / "g.pb"))
    np.savez(tmp_path / "batch.npz", **{"x:0": np.ones((4, 2))})
    argv = ["grad", str(tmp_path / "g.pb"), "--ys", "loss", "--xs", "w", "--feed", str(tmp_path / "batch.npz"),
            "-o", str(tmp_path / "out.pb"), "--dask", "local:1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "--dask needs Dask: pip install 'gradreg[dask]'" in err and "internal error" not in err


@pytest.mark.parametrize("shards", [1, 3])
def test_data_scattered_once_trains_as_batches_sent_each_step_bit_for_bit(threads_client, shards):
    """dp.scatter sends the arrays to every worker once; a step then sends row numbers (a shuffled
    batch's, or a slice), each worker takes its rows from its copy, and the losses, weights and
    gradients are those of the same batches sent as arrays."""
    rng = np.random.default_rng(11)
    x, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    graph = regression_graph()
    runs = []
    for resident in (True, False):
        dp = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy", shards=shards)
        dp.initialize()
        data = dp.scatter({"x": x, "y:0": y})
        assert len(data) == 30 and data.shapes == {"x:0": (30, 3), "y:0": (30,)}
        chosen = [b.with_feeds({"scale:0": np.float64(1.5)})
                  for b in data.batches(10, shuffle=True, seed=4, epochs=2)]
        chosen.append(data.batch(slice(5, 25), **{"scale:0": np.float64(0.5)}))   # a slice: in order
        assert len(chosen) == 7 and sorted(np.concatenate([b.index for b in chosen[:3]])) == list(range(30))
        sent = chosen if resident else [data.take(b, {"x:0": x, "y:0": y}) for b in chosen]
        losses = dp.train(gr.train.AdamOptimizer(0.05), sent, steps=7, progress=False, steps_per_task=2)
        moved = dp.last_step["shard_bytes"]
        runs.append((losses, dp.session.run(dp.xs), dp.loss_and_gradients(sent[0]), moved))
        dp.close()
        assert data.closed
    (losses, values, (ys, grads), moved), (want_losses, want_values, (want_ys, want_grads), want_moved) = runs
    assert losses == want_losses and len(losses) == 7
    for got, want in zip([*values, *ys, *grads], [*want_values, *want_ys, *want_grads]):
        np.testing.assert_array_equal(got, want)
    assert moved < want_moved and want_moved >= 20 * 4 * 8    # the slice's rows were sent as arrays only
    reference = SingleProcess(graph.as_graph_def().SerializeToString(), gr.train.AdamOptimizer(0.05))
    for b in chosen:
        feeds = data.take(b, {"x:0": x, "y:0": y})
        reference.session.run(reference.train_op, feeds)
    for got, want in zip(values, reference.values()):
        np.testing.assert_allclose(got, want, rtol=1e-10 if shards > 1 else 0)


def test_scattered_data_that_does_not_fit_the_graph_or_this_run_is_a_feed_error(threads_client):
    graph = regression_graph()
    dp = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy", shards=2)
    x, y = np.zeros((8, 3)), np.zeros(8)
    with pytest.raises(FeedError, match=r"share their first axis.*'x:0': \(8, 3\), 'y:0': \(7,\)"):
        dp.scatter({"x:0": x, "y:0": y[:7]})
    with pytest.raises(FeedError, match=r"feed 'x:0' has the shape \[None, 3\] in the graph; the array's "
                                        r"examples have the shape \[4\]"):
        dp.scatter({"x:0": np.zeros((8, 4)), "y:0": y})
    with pytest.raises(FeedError, match="'nope:0' names no tensor"):
        dp.scatter({"nope": x})
    data = dp.scatter({"x:0": x, "y:0": y})
    with pytest.raises(FeedError, match="row numbers out of range for data of 8 examples"):
        data.batch(np.array([0, 8]))
    with pytest.raises(FeedError, match="batch_size=9 is more than the 8 examples"):
        next(data.batches(9))
    assert [b.size for b in data.batches(3, drop_remainder=False, epochs=1)] == [3, 3, 2]
    other = DataParallel(graph, client=threads_client, split=["x:0", "y:0"], backend="numpy", shards=2)
    with pytest.raises(FeedError, match=f"the batch's data '{data.name}' was not scattered by this DataParallel"):
        other.gradients(data.batch(slice(0, 4)))
    other.close()
    data.close()
    with pytest.raises(FeedError, match="or is closed"):
        dp.gradients(data.batch(slice(0, 4)))
    dp.close()
    pinned = DataParallel(_pinned_graph(), xs=["w"], client=threads_client, split=["x:0"], backend="numpy",
                          relax_batch=False, shards=2)
    rows = pinned.scatter({"x:0": np.ones((300, 6), np.float32)})
    with pytest.raises(FeedError, match=r"each shard must hold 128 examples \(these hold 64\)"):
        pinned.gradients(rows.batch(slice(0, 128)))
    (loss,), _ = pinned.loss_and_gradients(rows.batch(slice(0, 256)))
    np.testing.assert_allclose(loss, 256 * 6 * 3 / 2, rtol=1e-6)     # the mean of the two shards' sums
    pinned.close()
