"""Issue 31's realistic sizes: one training step of Keras MobileNetV2 (alpha 1.0) and ResNet50 at
batch 32, 224x224, from TF-written graphs.

    python bench/protocol.py --workload mobilenet_v2_224 --workload resnet50_224 [--warmup 100 ...]
    python bench/realistic.py [NAME ...]      # make the graphs (if missing) and check every contender once

The graphs (bench/make_graphs.py's LARGE: frozen in inference mode like bench/foreign_cnn.py's,
TensorFlow's gradient graph beside, TensorFlow's values for the stored feeds) are written on
first use to $GRADREG_BENCH_GRAPHS, default ~/.cache/gradreg-bench/graphs (making them needs
TensorFlow and keras; ResNet50's take ~400 MB). A training step is: the forward pass, the
gradients of <y, cotangent> w.r.t. every weight, and SGD on the weights (w -= 0.01 g); each
contender keeps its weights and feeds them to the next step. Contenders, each in its own process:

* ``gradreg``: forward.pb differentiated by gradreg, the weights fed in place of the frozen
  constants, the update in NumPy in place;
* ``tensorflow``: TensorFlow's session on tf_grad.pb, the same feeds and update;
* ``tensorflow xla``: the same pruned graph as a tf.function with jit_compile=True, the update in
  TensorFlow;
* ``jax jit``: the graph translated to JAX (bench/graph_to_jax.py), step and update in one jit.

PyTorch and onnxruntime run the same architectures, not these graphs: torchvision's
``mobilenet_v2()`` (width 1.0) and ``resnet50()``, with PyTorch's own random initialisation (seed 0)
and layout (NCHW), a softmax after the logits as the Keras models end with, and the batch norms
calibrated on one batch of 32 images and then frozen (eval mode: a fixed affine map, as in the
frozen TF graphs). Their values are not TensorFlow's (other weights; Keras's ResNet50 also has
biases on its convolutions, torchvision's has none), so they are a reference for speed, not for
values; each is checked as far as it can be instead:

* ``pytorch eager``: forward on x (batch 32, 3x224x224, float32), loss = sum(y * cotangent) for a
  fixed random cotangent, backward, ``p -= 0.01 * p.grad`` under no_grad, the grads dropped;
  torch at its default thread count. Checked: the loss is finite, every parameter has a finite
  gradient, and the update changes every parameter;
* ``pytorch compile``: the same with the model under ``torch.compile`` (inductor, which needs a
  C++ compiler: without one it is left out, never run eagerly under that name); also checked
  against eager's output and gradients on the same weights;
* ``onnxruntime forward``: forward only, the model exported by ``torch.onnx.export`` (batch 32
  fixed) to the graphs' directory on first use, run by an InferenceSession on the CPU provider
  with default options; checked against PyTorch eager's forward.

They need torch, torchvision, and for onnxruntime also onnx, onnxscript and onnxruntime
(``pip install -e '.[bench]'``); contenders whose packages are missing are left out with the
reason printed. Not a contender: onnxruntime on these TF graphs (no converter of them to ONNX is
at hand: tf2onnx is not a dependency, and gradreg's exporter writes no Conv2D or Rsqrt).
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np

BENCH = pathlib.Path(__file__).resolve().parent
LR = 0.01
NAMES = ("mobilenet_v2_224", "resnet50_224")
# PyTorch's contenders: the same architectures from torchvision, at the TF graphs' sizes
TORCHVISION = {"mobilenet_v2_224": "mobilenet_v2", "resnet50_224": "resnet50"}
BATCH, SIZE, CLASSES = 32, 224, 1000


def graphs_dir() -> pathlib.Path:
    configured = os.environ.get("GRADREG_BENCH_GRAPHS", "").strip()
    return pathlib.Path(configured).expanduser() if configured else pathlib.Path.home() / ".cache/gradreg-bench/graphs"


def ensure(name: str) -> pathlib.Path:
    """The directory of graph set ``name``, made by bench/make_graphs.py when it is missing."""
    out = graphs_dir()
    if not (out / name / "tf_grad.pb").exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(BENCH / "make_graphs.py"), "--only", name, "--out", str(out)], check=True)
    return out


def _use(name: str):
    """foreign_graphs pointed at the large graphs' directory (set before it is imported)."""
    os.environ["GRADREG_BENCH_GRAPHS"] = str(ensure(name))
    import foreign_graphs
    foreign_graphs.GRAPHS = ensure(name)      # if it was imported before
    return foreign_graphs


def _weights(graph, names: list[str]) -> list[np.ndarray]:
    return [np.array(graph.get_tensor_by_name(t).op.get_attr("value")) for t in names]


def _check_first(name: str, y, grads) -> None:
    from foreign_cnn import _check
    fg = _use(name)
    entry = fg.manifest()[name]
    _check(name, entry["fetches"] + entry["tf_grad_tensors"][1:], [y, *grads])


def gradreg_step(name: str, backend: str | None = None, warm: bool = True):
    fg = _use(name)
    from foreign_cnn import gradreg_graph, settle

    import gradreg as gr
    entry = fg.manifest()[name]
    graph, fetches, (x, cotangent) = gradreg_graph(name)
    weight_tensors = [graph.get_tensor_by_name(t) for t in entry["xs"][1:]]
    weights = _weights(graph, entry["xs"][1:])
    session = gr.Session(graph, backend=backend)
    # the output and the weights' gradients (not the input's), fed the weights
    run = session.make_callable([fetches[0], *fetches[2:]], [x, cotangent, *weight_tensors])
    given = fg.feeds(name, grad_ys=True)
    lr = np.float32(LR)

    def step():
        y, *grads = run(given["x:0"], given["grad_ys_0:0"], *weights)
        for w, g in zip(weights, grads):
            w -= lr * g
        return y
    if warm:
        first = run(given["x:0"], given["grad_ys_0:0"], *weights)
        _check_first(name, first[0], first[1:])
        settle(step)
    return step, {"backend": session.backend}


def tensorflow_step(name: str, warm: bool = True, xla: bool = False):
    fg = _use(name)
    import tensorflow as tf
    entry = fg.manifest()[name]
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(fg.graph_path(name, "tf_grad.pb").read_bytes())
    weight_names = entry["xs"][1:]
    fetched = [entry["fetches"][0], *entry["tf_grad_tensors"][1:]]
    given = fg.feeds(name, grad_ys=True)
    import gradreg as gr  # the frozen weights, read from forward.pb as the other contenders do
    weights = _weights(gr.load_graph(str(fg.graph_path(name))), weight_names)
    if xla:
        return _xla_step(name, graph_def, weight_names, fetched, given, weights, warm)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    session = tf.compat.v1.Session(graph=graph)
    run = session.make_callable(fetched, ["x:0", "grad_ys_0:0", *weight_names])
    lr = np.float32(LR)

    def step():
        y, *grads = run(given["x:0"], given["grad_ys_0:0"], *weights)
        for w, g in zip(weights, grads):
            w -= lr * g
        return y
    if warm:
        first = run(given["x:0"], given["grad_ys_0:0"], *weights)
        _check_first(name, first[0], first[1:])
    return step, {"tensorflow": tf.__version__}


def _xla_step(name, graph_def, weight_names, fetched, given, weights, warm: bool):
    import tensorflow as tf

    def imported():
        tf.graph_util.import_graph_def(graph_def, name="")
    wrapped = tf.compat.v1.wrap_function(imported, [])
    pruned = wrapped.prune([wrapped.graph.get_tensor_by_name(t) for t in ["x:0", "grad_ys_0:0", *weight_names]],
                           [wrapped.graph.get_tensor_by_name(t) for t in fetched])
    variables = [tf.Variable(w) for w in weights]
    x, cotangent = tf.constant(given["x:0"]), tf.constant(given["grad_ys_0:0"])

    @tf.function(jit_compile=True)
    def train(x, cotangent):
        y, *grads = pruned(x, cotangent, *[v.read_value() for v in variables])
        for v, g in zip(variables, grads):
            v.assign_sub(LR * g)
        return y

    def step():
        return train(x, cotangent).numpy()
    if warm:
        first = tf.function(jit_compile=True)(lambda: pruned(x, cotangent, *variables))()
        _check_first(name, first[0].numpy(), [g.numpy() for g in first[1:]])
    return step, {"tensorflow": tf.__version__, "jit_compile": True}


def jax_step(name: str, warm: bool = True):
    fg = _use(name)
    import jax
    from graph_to_jax import translate

    import gradreg as gr
    entry = fg.manifest()[name]
    graph = gr.load_graph(str(fg.graph_path(name)))
    fn = translate(graph, entry["ys"][0], entry["xs"])
    weights = [jax.device_put(w) for w in _weights(graph, entry["xs"][1:])]
    given = fg.feeds(name, grad_ys=True)
    x, cotangent = jax.device_put(given["x:0"]), jax.device_put(given["grad_ys_0:0"])

    def grads_of(weights, x, cotangent):
        y, pullback = jax.vjp(lambda *w: fn(x, *w), *weights)
        return y, pullback(cotangent)

    @jax.jit
    def train(weights, x, cotangent):
        y, grads = grads_of(weights, x, cotangent)
        return y, [w - LR * g for w, g in zip(weights, grads)]
    state = {"weights": weights}

    def step():
        y, state["weights"] = train(state["weights"], x, cotangent)
        return jax.block_until_ready(y)
    if warm:
        y, grads = jax.jit(grads_of)(weights, x, cotangent)
        _check_first(name, np.asarray(y), [np.asarray(g) for g in grads])
    return step, {"jax": jax.__version__}


class Unavailable(RuntimeError):
    """A contender that cannot run on this machine (reported as such, never replaced by another)."""


_TORCHVISION_SCHEMAS: list = []     # the torch.library.Library that _torchvision() made, kept alive


def _torchvision():
    """torchvision, imported beside a CPU build of torch too. PyPI's torchvision wheels are built
    against a CUDA torch: beside the CPU build their C extension (the detection ops: nms,
    roi_align, ...) does not load, and torchvision 0.28's import then stops where it registers
    nms's fake kernel unconditionally ("operator torchvision::nms does not exist"). The
    classification models use none of those ops: the two schemas it registers that way are
    declared (and nothing else), and the import is tried again."""
    import torch
    try:
        import torchvision
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc) or _TORCHVISION_SCHEMAS:
            raise
        for module in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[module]
        schemas = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            schemas.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TORCHVISION_SCHEMAS.append(schemas)
        import torchvision
    return torchvision


def _torch_model(name: str, batch: int = BATCH):
    """torchvision's model for graph set ``name`` (random weights, seed 0) with a softmax after it,
    its batch norms calibrated on one batch and then frozen (eval mode); the input and cotangent."""
    import torch
    models = _torchvision().models
    torch.manual_seed(0)
    model = getattr(models, TORCHVISION[name])(weights=None)
    rng = np.random.default_rng(0)
    images = lambda: torch.from_numpy(rng.uniform(-1.0, 1.0, (batch, 3, SIZE, SIZE)).astype(np.float32))  # noqa: E731
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None          # the running statistics become the batch's
    model.train()
    with torch.no_grad():
        model(images())
    model = torch.nn.Sequential(model, torch.nn.Softmax(dim=1)).eval()
    x = images()
    cotangent = torch.from_numpy(rng.standard_normal((batch, CLASSES)).astype(np.float32))
    return model, x, cotangent


def _check_torch(label: str, loss, params, grads) -> None:
    import torch
    if not torch.isfinite(loss):
        raise AssertionError(f"{label}: the loss is {loss.item()}")
    bad = [i for i, g in enumerate(grads) if g is None or not bool(torch.isfinite(g).all())]
    if bad:
        raise AssertionError(f"{label}: {len(bad)} of {len(params)} parameters have no finite gradient "
                             f"(the first: parameter {bad[0]})")


def pytorch_step(name: str, compile: bool = False, warm: bool = True, batch: int = BATCH):
    """One training step of torchvision's model (module docstring), eagerly or under torch.compile."""
    import torch
    label = "pytorch compile" if compile else "pytorch eager"
    model, x, cotangent = _torch_model(name, batch)
    params = list(model.parameters())
    forward = model
    if compile:
        if shutil.which(_cxx()) is None:
            raise Unavailable(f"{label}: torch.compile's inductor needs a C++ compiler ({_cxx()}), none found")
        forward = torch.compile(model)

    def gradients():
        y = forward(x)
        loss = (y * cotangent).sum()
        loss.backward()
        grads = [p.grad for p in params]
        for p in params:
            p.grad = None
        return y.detach(), loss.detach(), grads
    if compile:
        gradients = _compiled_once(label, gradients)

    def update(grads) -> None:
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(g, alpha=LR)

    def step():
        y, _, grads = gradients()
        update(grads)
        return y
    info = {"torch": torch.__version__, "threads": torch.get_num_threads(), "compile": compile}
    print(f"{name}: {label}: torch {torch.__version__}, {torch.get_num_threads()} threads", file=sys.stderr)
    if warm:
        y, loss, grads = gradients()
        if compile:
            _compare_with_eager(label, model, x, cotangent, y, grads)
        _check_torch(label, loss, params, grads)
        before = [p.detach().clone() for p in params]
        update(grads)
        unchanged = [i for i, (b, p) in enumerate(zip(before, params)) if torch.equal(b, p)]
        if unchanged:
            raise AssertionError(f"{label}: the update left {len(unchanged)} of {len(params)} parameters "
                                 f"unchanged (the first: parameter {unchanged[0]})")
    return step, info


def _compiled_once(label: str, compiled):
    """``compiled`` whose first call (where inductor compiles the forward and backward passes)
    reports a failure as Unavailable: nothing runs eagerly in its place."""
    done = []

    def call():
        if done:
            return compiled()
        try:
            found = compiled()
        except Exception as exc:    # inductor's errors are of many classes
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise Unavailable(f"{label}: torch.compile could not compile the step: {type(exc).__name__}: "
                              f"{first}") from exc
        done.append(True)
        return found
    return call


def _compare_with_eager(label: str, model, x, cotangent, y, grads) -> None:
    """torch.compile's output and gradients against eager PyTorch's on the same weights."""
    import torch
    params = list(model.parameters())
    expected_y = model(x)
    (expected_y * cotangent).sum().backward()
    expected = [p.grad for p in params]
    for p in params:
        p.grad = None
    # y is a softmax over 1000 classes (values ~1e-3): atol 1e-7. The gradients sum over the batch and
    # the pixels in float32, in another order: eager PyTorch's own batch-norm gradients in ResNet50 are
    # up to 2.3% from float64's (relative norm of one parameter's gradient; torch.compile's 2.3% too, at
    # batch 8), so 5% is the tolerance: a wrong gradient is off by far more
    torch.testing.assert_close(y, expected_y.detach(), rtol=1e-4, atol=1e-7, msg=lambda m: f"{label}, y: {m}")
    worst = max(float((g - e).norm() / e.norm().clamp_min(1e-30)) for g, e in zip(grads, expected))
    if worst > 5e-2:
        raise AssertionError(f"{label}: a gradient differs from eager PyTorch's by {worst:.2g} (relative norm)")


def _cxx() -> str:
    """The C++ compiler torch.compile's inductor calls (its default: $CXX, else g++)."""
    return os.environ.get("CXX", "g++")


def onnx_path(name: str, batch: int = BATCH) -> pathlib.Path:
    """torchvision's model for ``name`` as ONNX (batch fixed), exported on first use into the
    graphs' directory; the file names the torch and torchvision that made its weights."""
    import torch
    torchvision = _torchvision()
    path = (graphs_dir() / name / f"torchvision_{TORCHVISION[name]}_b{batch}_torch{torch.__version__}"
            f"_tv{torchvision.__version__}.onnx")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        model, x, _ = _torch_model(name, batch)
        partial = path.with_suffix(".partial")
        torch.onnx.export(model, (x,), str(partial), input_names=["x"], output_names=["y"], dynamo=True,
                          external_data=False)
        partial.replace(path)
    return path


def onnxruntime_step(name: str, warm: bool = True, batch: int = BATCH):
    """One forward pass of the exported model in onnxruntime (module docstring)."""
    import onnxruntime
    path = onnx_path(name, batch)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    model, x, _ = _torch_model(name, batch)
    feed = {session.get_inputs()[0].name: x.numpy()}

    def step():
        return session.run(None, feed)[0]
    if warm:
        import torch
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(torch.from_numpy(step()), expected, rtol=1e-4, atol=1e-7,
                                   msg=lambda m: f"onnxruntime forward against PyTorch eager ({path}): {m}")
    del model
    return step, {"onnxruntime": onnxruntime.__version__}


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _candidates(name: str, tf: bool, jax: bool, torch: bool, onnxruntime: bool):
    """Every contender, each with the reason it is left out (None: it runs)."""
    no_torch = None if torch else "needs torch and torchvision (pip install -e '.[bench]')"
    no_compiler = None if shutil.which(_cxx()) else f"torch.compile's inductor needs a C++ compiler ({_cxx()})"
    return [
        (("gradreg", "realistic:gradreg_step", {"name": name}), None),
        (("tensorflow", "realistic:tensorflow_step", {"name": name}), None if tf else "needs tensorflow"),
        (("tensorflow xla", "realistic:tensorflow_step", {"name": name, "xla": True}),
         None if tf else "needs tensorflow"),
        (("jax jit", "realistic:jax_step", {"name": name}), None if jax else "needs jax"),
        (("pytorch eager", "realistic:pytorch_step", {"name": name}), no_torch),
        (("pytorch compile", "realistic:pytorch_step", {"name": name, "compile": True}), no_torch or no_compiler),
        (("onnxruntime forward", "realistic:onnxruntime_step", {"name": name}),
         no_torch or (None if onnxruntime else "needs onnx, onnxscript and onnxruntime (pip install -e '.[bench]')")),
    ]


def contenders(name: str, tf: bool, jax: bool, torch: bool = False,
               onnxruntime: bool = False) -> list[tuple[str, str, dict]]:
    """The contenders that can run (``tf``, ``jax``, ...: whether those packages are installed)."""
    return [spec for spec, why in _candidates(name, tf, jax, torch, onnxruntime) if why is None]


def left_out(tf: bool, jax: bool, torch: bool = False, onnxruntime: bool = False) -> dict[str, str]:
    """The contenders left out, each with the reason."""
    return {spec[0]: why for spec, why in _candidates(NAMES[0], tf, jax, torch, onnxruntime) if why is not None}


def installed() -> dict[str, bool]:
    """Which references' packages are installed: contenders()'s and left_out()'s keyword arguments."""
    return {"tf": _have("tensorflow"), "jax": _have("jax"), "torch": _have("torch") and _have("torchvision"),
            "onnxruntime": all(_have(m) for m in ("onnx", "onnxscript", "onnxruntime"))}


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="Make the realistic graphs (if missing) and check every "
                                     "contender once; bench/protocol.py measures them.")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"graph sets, default all: {', '.join(NAMES)}")
    wanted = parser.parse_args().names
    unknown = [n for n in wanted if n not in NAMES]
    if unknown:
        parser.error(f"unknown graph set {unknown[0]!r}: choose from {', '.join(NAMES)}")
    import foreign_cnn
    foreign_cnn.settle = lambda step, calls=2: None     # a check, not a measurement: no settling
    have = installed()
    for label, why in left_out(**have).items():
        print(f"{label}: left out, {why}", flush=True)
    for graph_set in wanted or NAMES:
        ensure(graph_set)
        for label, factory, kwargs in contenders(graph_set, **have):
            module, function = factory.split(":")
            try:
                made, _ = globals()[function](**kwargs)
            except Unavailable as exc:
                print(f"{graph_set}: {label} unavailable: {exc}", flush=True)
                continue
            made()
            checked = ("checked against TensorFlow's values" if label in ("gradreg", "tensorflow", "tensorflow xla",
                                                                          "jax jit")
                       else "checked (PyTorch's own weights: see the module docstring)")
            print(f"{graph_set}: {label} {checked} and ran a step", flush=True)
