"""Every loader of gradreg as a function of bytes, for coverage-guided fuzzing (atheris) and for
hypothesis: each must return or raise a GradregError, never anything else, for any input.

    python -m tests.fuzz.loaders graphdef -runs=100000     # atheris, one target (libFuzzer flags after it)
    python -m tests.fuzz.loaders any -max_total_time=900    # every target in one run: the first byte picks it
    python -m tests.fuzz.loaders all -max_total_time=900    # every target in turn, 900 s each

Targets: GraphDef in its three encodings, a SavedModel's saved_model.pb and saved_model.pbtxt, a tensor
bundle's index (the SSTable and its entries), TensorFlow's checkpoint state file, gradreg's .npz
checkpoint and its index file, a .meta file, an ONNX model, feed files (.npy, .npz).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable

import numpy as np

_DIRECTORY = tempfile.mkdtemp(prefix="gradreg-loaders-")


def _file(name: str, data: bytes) -> str:
    path = os.path.join(_DIRECTORY, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def graphdef(data: bytes) -> None:
    import gradreg as gr
    from gradreg.errors import GradregError
    for fmt in ("graphdef", "graphdef-text", "graphdef-json"):
        with contextlib.suppress(GradregError):
            gr.load_graph(data, format=fmt)


def saved_model(data: bytes) -> None:
    import gradreg as gr
    from gradreg.errors import GradregError
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        model = os.path.join(_DIRECTORY, "model")
        os.makedirs(model, exist_ok=True)
        for old in os.listdir(model):
            os.unlink(os.path.join(model, old))
        _file(os.path.join("model", name), data)
        with contextlib.suppress(GradregError):
            gr.load_saved_model(model, run_init_op=False)


def bundle(data: bytes) -> None:
    from gradreg.errors import GradregError
    from gradreg.formats.tensor_bundle import BundleReader
    _file("ckpt.index", data)
    _file("ckpt.data-00000-of-00001", data[::-1])
    try:
        reader = BundleReader(os.path.join(_DIRECTORY, "ckpt"))
        for key in list(reader)[:8]:
            reader.read(key)
    except GradregError:
        pass


def checkpoint_state(data: bytes) -> None:
    from gradreg.errors import GradregError
    from gradreg.formats import tf_checkpoint
    from gradreg.training import checkpoint
    _file("checkpoint", data)
    for read in (tf_checkpoint.latest_checkpoint, checkpoint.latest_checkpoint):
        with contextlib.suppress(GradregError):
            read(_DIRECTORY)


def npz_checkpoint(data: bytes) -> None:
    from gradreg.errors import GradregError
    from gradreg.training import checkpoint
    path = _file("model-1.npz", data)
    with contextlib.suppress(GradregError):
        checkpoint.read_checkpoint(path)


def meta_graph(data: bytes) -> None:
    import gradreg as gr
    from gradreg.errors import GradregError
    path = _file("model.meta", data)
    try:
        with gr.Graph().as_default():
            gr.train.import_meta_graph(path)
    except GradregError:
        pass


def onnx_model(data: bytes) -> None:
    import gradreg as gr
    from gradreg.errors import GradregError
    with contextlib.suppress(GradregError):
        gr.load_graph(data, format="onnx", base_dir=_DIRECTORY)


def feeds(data: bytes) -> None:
    from gradreg.errors import GradregError
    from gradreg.formats.arrays import read_npy, read_npz
    path = _file("feed.bin", data)
    for read in (read_npy, read_npz):
        try:
            value = read(path, max_elements=10**6)
            np.asarray(value)
        except GradregError:
            pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "graphdef": graphdef, "saved_model": saved_model, "bundle": bundle, "checkpoint_state": checkpoint_state,
    "npz_checkpoint": npz_checkpoint, "meta_graph": meta_graph, "onnx": onnx_model, "feeds": feeds,
}
_ORDER = list(TARGETS)


def any_loader(data: bytes) -> None:
    """Every target in one: the first byte picks the loader, the rest is its input."""
    if data:
        TARGETS[_ORDER[data[0] % len(_ORDER)]](data[1:])


_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
# Files of tests/data each target starts from (libFuzzer mutates them; random bytes rarely parse).
SEEDS = {
    "graphdef": ["tf_corpus/mlp_softmax_xent/forward.pb", "tf_corpus/while_v1/forward.pb",
                 "tf_corpus/cond_while_v2/forward.pb"],
    "saved_model": ["checkpoints/saved_module/saved_model.pb", "saved_model_io/tf1_model/saved_model.pb"],
    "bundle": ["checkpoints/saved_module/variables/variables.index", "checkpoints/tf1/model.ckpt-3.index"],
    "checkpoint_state": ["checkpoints/tf1/checkpoint"],
    "npz_checkpoint": [],
    "meta_graph": ["checkpoints/tf1/model.ckpt-3.meta"],
    "onnx": ["onnx_models/mlp_gelu_opset18/model.onnx", "onnx_models/loop_opset13/model.onnx"],
    "feeds": ["onnx_models/mlp_gelu_opset18/inputs.npz"],
}


def seed_corpus(target: str) -> str:
    """A directory holding the target's seed files (a libFuzzer corpus argument); for ``any``, every
    target's, each behind the byte that picks its target."""
    corpus = tempfile.mkdtemp(prefix=f"gradreg-corpus-{target}-")
    for name in _ORDER if target == "any" else [target]:
        prefix = bytes([_ORDER.index(name)]) if target == "any" else b""
        for i, seed in enumerate(SEEDS[name]):
            path = os.path.join(_DATA, seed)
            if os.path.isfile(path):
                with open(path, "rb") as f, open(os.path.join(corpus, f"{name}{i}"), "wb") as out:
                    out.write(prefix + f.read())
    return corpus


def main(argv: list[str]) -> None:
    """``TARGET [libFuzzer flags]``: fuzz one target (or ``all``, each in a child process) with atheris."""
    if len(argv) < 2 or argv[1] not in (*TARGETS, "any", "all"):
        sys.exit(f"usage: python -m tests.fuzz.loaders {{{','.join(TARGETS)},any,all}} [libFuzzer flags]")
    if argv[1] == "all":
        import subprocess
        status = 0
        for name in TARGETS:
            print(f"== {name}", flush=True)
            status |= subprocess.call([sys.executable, "-m", __spec__.name if __spec__ else "fuzz.loaders", name,
                                       *argv[2:]])
        sys.exit(status)
    import atheris
    target = any_loader if argv[1] == "any" else TARGETS[argv[1]]
    with atheris.instrument_imports(include=["gradreg", "gradreg_plugins"]):     # only gradreg's own code
        import gradreg  # noqa: F401
        import gradreg.formats.saved_model_loader  # noqa: F401
        import gradreg.training.checkpoint  # noqa: F401
        import gradreg_plugins.onnx.format  # noqa: F401
        for name in TARGETS.values():      # the modules each target imports when first run
            with contextlib.suppress(Exception):
                name(b"")
    atheris.Setup([argv[0], *argv[2:], seed_corpus(argv[1])], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
