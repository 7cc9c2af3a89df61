"""Train a graph TensorFlow wrote, with its batch size fixed, data-parallel on a Dask cluster.

    pip install ".[dask]"
    python examples/train_dask.py [--graph bench/graphs/mlp_784_512_512_10/forward.pb] [--workers 2]
                                  [--steps 40] [--scheduler tcp://host:8786] [--out runs/dask]

The default graph is the TF1 MLP 784-512-512-10 of the benchmarks (bench/make_graphs.py): its
placeholders are ``x [128, 784]`` and ``labels [128]``, as TensorFlow wrote them. Nothing is
changed by hand: DataParallel frees the batch size (each worker gets 64 of the 128 examples)
and, for a frozen graph whose weights are Consts (``--graph examples/mlp/model.pbtxt``, batch
8), turns the weights into variables. The data is synthetic (labels from a fixed random linear
teacher), so nothing is downloaded.

The same graph is trained twice from the same initial values on the same batches: in this
process with gradreg alone (the single-process loss curve), and on ``--workers`` Dask
worker processes (a LocalCluster started here, or the scheduler at ``--scheduler``), the
variables resident on the workers, the shards' gradients summed on the workers and applied
by each. The script prints both loss curves; they agree to float32 rounding. A checkpoint is
written every ``--checkpoint-every`` steps; ``--resume`` continues from the newest one. With
``--scatter`` the training set goes to every worker once and each step sends row numbers.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import time

import numpy as np

import gradreg as gr

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_GRAPH = ROOT / "bench" / "graphs" / "mlp_784_512_512_10" / "forward.pb"


def frozen_weights(graph: gr.Graph, loss: str) -> list[str]:
    """A frozen graph's weights: the floating-point Consts of rank >= 1 that the loss reads."""
    seen, stack, found = set(), [graph.get_tensor(loss).op], []
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        if op.type == "Const" and op.outputs[0].dtype.is_floating and op.outputs[0].shape.rank:
            found.append(op.name)
    return sorted(found)


def model_xs(graph: gr.Graph, loss: str) -> list[str] | None:
    """None (the trainable variables) for a graph with variables, else the frozen weights."""
    return None if gr.train.find_variables(graph) else frozen_weights(graph, loss)


def synthetic_batches(graph: gr.Graph, x: str, labels: str, steps: int, seed: int = 7):
    """``steps`` batches shaped as the graph's placeholders: x ~ N(0, 1), labels from a fixed
    random linear teacher (sparse int labels, or one-hot rows for a float labels placeholder)."""
    x_shape = graph.get_tensor(x).shape.as_list()
    label_t = graph.get_tensor(labels)
    batch, features = x_shape[0] or 32, x_shape[1]
    classes = label_t.shape.as_list()[1] if label_t.shape.rank == 2 else 10
    rng = np.random.default_rng(seed)
    teacher = rng.normal(size=(features, classes))
    for _ in range(steps):
        xs = rng.normal(size=(batch, features)).astype(np.float32)
        target = np.argmax(xs @ teacher, axis=1)
        if label_t.dtype.is_floating:
            yield {x: xs, labels: np.eye(classes, dtype=np.float32)[target]}
        else:
            yield {x: xs, labels: target.astype(label_t.dtype.as_numpy_dtype)}


def single_process(path: str, args, batches: list[dict]) -> list[float]:
    """The reference: the graph trained in this process by gradreg alone (frozen weights thawed alike)."""
    from gradreg.distributed import thaw_constants
    graph = gr.load_graph(path)
    xs = model_xs(graph, args.loss)
    if xs:
        graph = gr.load_graph(thaw_constants(graph.as_graph_def(), xs).SerializeToString())
    variables = [v for v in gr.train.find_variables(graph) if v.trainable]
    with graph.as_default():
        train_op = gr.train.AdamOptimizer(args.lr).minimize(graph.get_tensor(args.loss), var_list=variables,
                                                            global_step=gr.train.get_or_create_global_step())
        init = gr.global_variables_initializer()
    session = gr.Session(graph)
    session.run(init)
    return [float(session.run([args.loss, train_op], feeds)[0]) for feeds in batches]


def data_parallel(path: str, args, batches: list[dict], client) -> list[float]:
    from gradreg.distributed import DataParallel
    graph = gr.load_graph(path)
    with DataParallel(path, loss=args.loss, xs=model_xs(graph, args.loss), client=client,
                      split=[args.x, args.labels]) as dp:
        report = dp.batch_report
        if report.batch is not None:
            print(f"{path}: batch size {report.batch} freed in {', '.join(report.freed)}"
                  + (f"; TensorFlow's folded shapes made Shape ops again: {', '.join(report.unpinned)}"
                     if report.unpinned else ""))
        given: list = batches
        if args.scatter:    # the whole training set to every worker once; a step then sends row numbers
            data = dp.scatter({name: np.concatenate([b[name] for b in batches]) for name in batches[0]})
            size = len(batches[0][args.x])
            given = [data.batch(slice(i * size, (i + 1) * size)) for i in range(len(batches))]
        start = time.perf_counter()
        done = dp.global_step if args.resume else 0
        losses = dp.train(gr.train.AdamOptimizer(args.lr), given[done:], steps=len(batches) - done,
                          checkpoint_dir=args.out, checkpoint_every=args.checkpoint_every, resume=args.resume,
                          progress=False)
        print(f"{len(losses)} steps on {dp.shards} shards in {time.perf_counter() - start:.1f} s "
              f"(global step {dp.global_step}); checkpoints in {args.out}")
    return losses


def main(argv=None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default=str(DEFAULT_GRAPH), help="a GraphDef TensorFlow wrote (.pb/.pbtxt)")
    parser.add_argument("--loss", default="loss:0")
    parser.add_argument("--x", default="x:0", help="the input placeholder (split along axis 0)")
    parser.add_argument("--labels", default="labels:0", help="the labels placeholder (split along axis 0)")
    parser.add_argument("--workers", type=int, default=2, help="local worker processes (without --scheduler)")
    parser.add_argument("--scheduler", help="address of a running Dask scheduler instead of a local cluster")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--out", default=os.path.join("runs", "dask"))
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    parser.add_argument("--scatter", action="store_true",
                        help="send the training set to the workers once (DataParallel.scatter) instead of each "
                             "batch with its step")
    args = parser.parse_args(argv)
    graph = gr.load_graph(args.graph)
    batches = list(synthetic_batches(graph, args.x, args.labels, args.steps))
    single = single_process(args.graph, args, batches)

    import dask
    from distributed import Client, LocalCluster
    if args.scheduler:
        with Client(args.scheduler) as client:
            parallel = data_parallel(args.graph, args, batches, client)
    else:
        # Dask's nannies set MALLOC_TRIM_THRESHOLD_, which costs a step's large arrays a page fault
        # each (glibc stops reusing freed blocks of that size): left unset here.
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}), \
                LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                             dashboard_address=":0") as cluster, Client(cluster) as client:
            parallel = data_parallel(args.graph, args, batches, client)
    shown = single[-len(parallel):] if parallel else []
    print(f"{'step':>5} {'one process':>12} {'data-parallel':>14}")
    for i in sorted({0, len(shown) // 2, len(shown) - 1} if shown else []):
        print(f"{len(single) - len(shown) + i + 1:>5} {shown[i]:12.6f} {parallel[i]:14.6f}")
    if shown:
        gap = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(shown, parallel))
        print(f"largest relative difference between the loss curves: {gap:.2e}")
    return {"single": single, "parallel": parallel}


if __name__ == "__main__":
    main()
