"""Regenerate tests/data/tf_models: graphs that TensorFlow and Keras wrote, with TensorFlow's values.

Needs the `tf` extra (tensorflow-cpu==2.21.0) and keras 3. Layout and conventions: README.md here.

    python tests/data/tf_models/make_reference.py              # every case, each in its own process
    python tests/data/tf_models/make_reference.py --only lstm  # one case (repeatable)
    python tests/data/tf_models/make_reference.py --list

Every graph case is then run again from its stored files by TensorFlow with oneDNN off (a second
CPU implementation): each graph must agree with the stored values within the case tolerance, and
the worst error as a fraction of the tolerance is recorded as tf_without_onednn_error_vs_tolerance.

Each case runs in a fresh Python process with seeds derived from its name, so a case regenerated
alone gets the same weights, inputs and reference values as in a full run. The GraphDefs are
equivalent but not always byte-identical from run to run: TensorFlow numbers traced functions with
a process-wide counter and Grappler (which lowers control flow while freezing) does not always fold
the same constants; SavedModels also carry a fresh fingerprint.pb.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The order of a full run; the module that makes each group is imported only when needed.
GROUPS = {
    "keras_cases": [
        "mobilenet_v2", "resnet_slim", "resnet_slim_f64", "densenet_slim", "efficientnet_slim",
        "lstm", "gru", "simple_rnn", "bidirectional_lstm", "conv_lstm2d", "transformer_block", "decoder",
        "batchnorm_inference", "batchnorm_training", "fused_batch_norm", "embedding", "dropout_training",
        "conv1d", "conv2d_transpose_upsampling", "swish", "linalg",
    ],
    "tf1_cases": [
        "tf1_train_ref_sgd", "tf1_train_ref_adam", "tf1_train_resource_sgd", "tf1_train_resource_adam",
        "tf1_dynamic_rnn", "tf1_sliced_rnn", "tf1_while_reads_variable", "tf1_cond_reads_variable", "tf1_ref_loop",
        "tf1_v2_control_flow_resource", "tf1_train_block_lstm", "tf1_map_fn_ragged", "tf1_map_fn_ragged_v2",
    ],
    "saved_model_cases": [
        "saved_models/module_two_signatures", "saved_models/keras_export", "saved_models/while_loop",
        "saved_models/keras_lstm", "saved_models/keras_cnn", "saved_models/v1_checkpoint",
        "saved_models/custom_gradients", "saved_models/keras_efficientnet", "saved_models/while_cond",
    ],
}
ALL = [name for names in GROUPS.values() for name in names]


def make_one(name: str) -> None:
    """Write one case directory (in this process)."""
    import importlib
    group = next(g for g, names in GROUPS.items() if name in names)
    module = importlib.import_module(group)
    module.make(name.split("/")[-1], HERE / name)


def cross_check(name: str) -> None:
    """Run a written graph case's stored graphs in this process's TensorFlow (the driver starts it
    with oneDNN off) and record, per graph, the worst element's error as a fraction of what the
    case tolerance allows (1.0 = at the limit); fail beyond 1, which would mean the reference is
    too ill-conditioned to referee other float implementations."""
    import json

    import numpy as np
    sys.path.insert(0, str(HERE.parent.parent))
    from tensorflow.core.framework import graph_pb2
    from tf_models import allowed_error, load_case
    from tfhelpers import import_graph, tf1
    case = load_case(name)
    devs = {}
    for key in case.graph_keys():
        if case.graphs[key]["kind"] == "train":
            continue
        pairs = [(t, case.forward_values()[f]) for f, t in case.fetch_map(key).items()]
        if case.graphs[key]["kind"] != "forward":
            pairs += [(t, case.gradient_values()[x]) for x, t in case.gradient_tensors(key).items() if t]
        graph_def = graph_pb2.GraphDef.FromString(case.graph_path(key).read_bytes())
        with tf1.Session(graph=import_graph(graph_def)) as sess:
            if case.meta["kind"] == "tf1":
                sess.run(case.meta["init_op"])
            values = sess.run([t for t, _ in pairs], case.feeds(key))
        worst = 0.0
        for (tensor, expected), value in zip(pairs, values):
            if expected.dtype.kind != "f" or not expected.size:
                continue
            ratio = float(np.max(np.abs(np.asarray(value, np.float64) - expected)
                                 / allowed_error(expected, **case.tolerance)))
            if not ratio <= 1.0:
                raise AssertionError(f"{name} {key} {tensor}: TensorFlow without oneDNN is off by {ratio:.3g}"
                                     " times the tolerance")
            worst = max(worst, ratio)
        devs[key] = round(worst, 4)
    meta = dict(case.meta, tf_without_onednn_error_vs_tolerance=devs)
    (case.path / "case.json").write_text(json.dumps(meta, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=ALL, metavar="NAME", help="regenerate NAME only")
    parser.add_argument("--list", action="store_true", help="list the case names")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cross-check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(ALL))
        return 0
    names = args.only or ALL
    if args.in_process and len(names) == 1:
        (cross_check if args.cross_check else make_one)(names[0])
        return 0
    failed = []
    for name in names:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--in-process", "--only", name])
        if done.returncode == 0 and "/" not in name:
            done = subprocess.run([sys.executable, __file__, "--in-process", "--cross-check", "--only", name],
                                  env=dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0"))
        print(f"{name}: {'ok' if done.returncode == 0 else 'FAILED'} ({time.perf_counter() - start:.0f} s)",
              flush=True)
        if done.returncode:
            failed.append(name)
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
