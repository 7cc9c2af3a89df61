"""Export small PyTorch models to ONNX and store torch's outputs and autograd gradients next to them.

    pip install torch==2.13.0 onnx onnxruntime onnxscript
    python tests/data/onnx_models/make_reference.py            # every case
    python tests/data/onnx_models/make_reference.py lstm_opset18 gru_opset13

Each case directory gets model.onnx (plus model.onnx.data for external_data_opset18), inputs.npz,
expected.npz and case.json; README.md in this directory describes them. The script is deterministic:
every case seeds torch and NumPy from its own fixed seed and runs single-threaded.

Export settings, and why:
* dynamo exporter (``torch.onnx.export(..., dynamo=True)``, torch's default) with ``optimize=False``:
  the onnxscript optimizer that ``optimize=True`` runs folds BatchNormalization into the preceding Conv
  and keeps the Conv's initializer name (``conv1.weight``) for the fused values, so a gradient keyed by
  that name would not be torch's gradient for ``conv1.weight``. Without it every parameter stays an
  initializer under its torch name. This exporter goes no lower than opset 18 (its version conversion
  to 13 fails and it silently falls back to 18), and in training mode it writes an inference-mode
  BatchNormalization (no training_mode attribute: running statistics, not batch statistics).
* TorchScript exporter (``dynamo=False``) with ``do_constant_folding=False`` for opsets 7 and 13, for
  the scripted Loop and for training-mode BatchNormalization (training_mode=1, opset 15).
* Every parameter and buffer gets non-trivial random values first (BN statistics, LayerNorm affine):
  the TorchScript exporter replaces an initializer equal to another one by an Identity of it, which
  would tie e.g. ``bn.running_var`` (all ones) to ``bn.weight`` (all ones) in the ONNX graph.

Checks made before anything is written (the script stops on the first failure):
* ``onnx.checker.check_model(full_check=True)``; the op types each case is meant to exercise are in the
  graph (``LSTM``, ``GRU``, ``If``, ``Loop``, ``Resize``, ``BatchNormalization`` with training_mode=1...);
* each torch parameter is an initializer of the same name holding exactly the same values, and
  perturbing it (``p + delta`` in torch, the same values fed to that initializer in onnxruntime) moves
  both outputs alike, so the gradient stored under that name is the ONNX graph's gradient;
* onnxruntime's outputs match torch's (the measured gap is stored in case.json).
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import shutil
import sys
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import torch_models as tm  # noqa: E402

MAX_BYTES = 15 * 2**20


@dataclass
class Spec:
    """One case: which module, its inputs (name -> shape, batch first), how it is exported."""

    name: str
    description: str
    module: Callable[[], torch.nn.Module]
    inputs: dict
    outputs: list
    exporter: str                      # "dynamo" or "torchscript"
    opset: int
    require: tuple = ()                # op types that must appear in the exported graph
    training: bool = False
    dynamic_batch: bool = False
    dynamic_image: int = 0             # batch, height and width symbolic (the last two multiples of it)
    other_inputs: dict | None = None   # a second input shape: torch's gradients for it too ("other:" keys)
    external_data: bool = False
    script: bool = False
    positive_sum: bool = False         # flip x so x.sum() > 0 (TwoConds picks fixed branches)
    notes: list = field(default_factory=list)


IMAGE = {"x": (2, 3, 32, 32)}
RESNET_OPS = ("Conv", "BatchNormalization", "Relu", "MaxPool", "Add", "Gemm")
MOBILENET_OPS = ("Conv", "BatchNormalization", "Clip", "Add", "Gemm")

SPECS = [
    Spec("resnet_opset18", "ResNet-style net: BasicBlocks, BN, ReLU, residual adds, global pool, fc",
         tm.ResNet, IMAGE, ["logits"], "dynamo", 18, RESNET_OPS),
    Spec("resnet_opset13", "the same ResNet-style net, TorchScript exporter", tm.ResNet, IMAGE, ["logits"],
         "torchscript", 13, RESNET_OPS + ("GlobalAveragePool",)),
    Spec("resnet_opset7", "the same ResNet-style net at opset 7 (for the version converter)", tm.ResNet,
         IMAGE, ["logits"], "torchscript", 7, RESNET_OPS + ("GlobalAveragePool",)),
    Spec("mobilenetv2_opset18", "MobileNetV2-style net: inverted residuals, depthwise conv, ReLU6",
         tm.MobileNetV2, IMAGE, ["logits"], "dynamo", 18, MOBILENET_OPS),
    Spec("mobilenetv2_opset13", "the same MobileNetV2-style net, TorchScript exporter", tm.MobileNetV2,
         IMAGE, ["logits"], "torchscript", 13, MOBILENET_OPS),
    Spec("transformer_opset18", "nn.TransformerEncoderLayer(16, 4 heads, batch_first), eval mode",
         tm.Encoder, {"x": (2, 5, 16)}, ["y"], "dynamo", 18, ("MatMul", "Softmax", "LayerNormalization")),
    Spec("transformer_opset17", "the same encoder layer, TorchScript exporter", tm.Encoder,
         {"x": (2, 5, 16)}, ["y"], "torchscript", 17, ("MatMul", "Softmax", "LayerNormalization")),
    Spec("lstm_opset18", "two-layer nn.LSTM with initial states, exported as two ONNX LSTM nodes",
         tm.StackedLSTM, {"x": (2, 5, 4), "h0": (2, 2, 6), "c0": (2, 2, 6)}, ["y", "hn", "cn"],
         "dynamo", 18, ("LSTM",)),
    Spec("gru_opset13", "bidirectional nn.GRU with an initial state, exported as one ONNX GRU node",
         tm.BiGRU, {"x": (2, 5, 4), "h0": (2, 2, 6)}, ["y", "hn"], "torchscript", 13, ("GRU",)),
    Spec("mlp_gelu_opset18", "Linear/LayerNorm/GELU MLP; GELU decomposed (Erf, Tanh) at opset 18",
         tm.LayerNormGeluMLP, {"x": (2, 8)}, ["y"], "dynamo", 18, ("LayerNormalization", "Erf", "Tanh")),
    Spec("mlp_gelu_opset20", "the same MLP at opset 20, where GELU is one Gelu op", tm.LayerNormGeluMLP,
         {"x": (2, 8)}, ["y"], "dynamo", 20, ("LayerNormalization", "Gelu")),
    Spec("upsample_opset18", "ConvTranspose2d + BatchNorm2d + bilinear Resize (half_pixel, align_corners)",
         tm.UpsampleBlock, {"x": (2, 3, 5, 5)}, ["a", "b"], "dynamo", 18,
         ("ConvTranspose", "BatchNormalization", "Resize")),
    Spec("dynamic_batch_opset18", "small CNN with a symbolic batch dimension 'batch' on x and logits",
         tm.SmallCNN, {"x": (2, 3, 8, 8)}, ["logits"], "dynamo", 18, ("Conv", "MaxPool", "Gemm"),
         dynamic_batch=True),
    Spec("unet_opset17", "two U-Net levels: bilinear nn.Upsample and F.interpolate to the skip's size, sizes "
         "and scales computed by Shape/Slice/Concat ops", tm.UNetBlock, {"x": (2, 3, 8, 12)}, ["y"], "torchscript",
         17, ("Resize", "Shape", "Concat", "MaxPool")),
    Spec("unet_dynamic_opset18", "the same U-Net with batch, height and width symbolic: the second Resize's sizes "
         "are read from a Shape at run time", tm.UNetBlock, {"x": (2, 3, 8, 12)}, ["y"], "dynamo", 18,
         ("Resize", "Shape", "Concat"), dynamic_image=4, other_inputs={"x": (3, 3, 12, 8)}),
    Spec("external_data_opset18", "MLP whose large weights live in model.onnx.data", tm.WideMLP,
         {"x": (2, 16)}, ["y"], "dynamo", 18, ("Gemm", "Tanh"), external_data=True),
    Spec("cond_opset18", "two torch.cond calls exported as ONNX If: then-branch, then else-branch",
         tm.TwoConds, {"x": (2, 4)}, ["y"], "dynamo", 18, ("If",), positive_sum=True),
    Spec("loop_opset13", "scripted Python loop (batch+1 = 3 iterations, two carried values) exported as ONNX Loop",
         tm.RecurrentLoop, {"x": (2, 4)}, ["y"], "torchscript", 13, ("Loop",), script=True),
    Spec("batchnorm_train_opset15", "Conv/BatchNorm2d in training mode: batch statistics, training_mode=1",
         tm.TrainingBatchNorm, {"x": (2, 3, 6, 6)}, ["y"], "torchscript", 15, ("BatchNormalization",),
         training=True, notes=["The exported running_mean/running_var initializers are one momentum step on "
                               "from torch's buffers (tracing ran the model once in training mode); the "
                               "output does not read them.",
                               "conv1.bias and conv2.bias feed training-mode BatchNormalization, which "
                               "subtracts the batch mean: they have no effect and a (numerically) zero "
                               "gradient."]),
]


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode()) % 2**31


def randomize_state(module: torch.nn.Module, rng: np.random.Generator) -> None:
    """Non-trivial values for BN statistics and for parameters torch initializes to constants."""
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if not tensor.is_floating_point():
                continue
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "running_var":
                values = rng.uniform(0.5, 1.5, tensor.shape)
            elif leaf == "running_mean" or tensor.numel() > 1 and float(tensor.std()) == 0.0:
                base = 1.0 if leaf == "weight" else 0.0
                values = base + 0.2 * rng.standard_normal(tensor.shape)
            else:
                continue
            tensor.copy_(torch.from_numpy(values.astype(np.float32)))


def make_inputs(spec: Spec, rng: np.random.Generator) -> dict:
    inputs = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in spec.inputs.items()}
    if spec.positive_sum and inputs["x"].sum() <= 0:
        inputs["x"] = -inputs["x"]
    return inputs


def export(spec: Spec, module: torch.nn.Module, inputs: dict, path: pathlib.Path) -> None:
    """torch.onnx.export with the settings the module docstring explains; torch's state is restored
    afterwards because tracing a training-mode BatchNorm updates its running statistics."""
    state = copy.deepcopy(module.state_dict())
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    names = dict(input_names=list(inputs), output_names=spec.outputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if spec.exporter == "dynamo":
            dynamic = tuple({0: torch.export.Dim("batch")} for _ in args) if spec.dynamic_batch else None
            if spec.dynamic_image:
                k = spec.dynamic_image
                height, width = torch.export.Dim("h", min=1, max=256), torch.export.Dim("w", min=1, max=256)
                dynamic = tuple({0: torch.export.Dim("batch"), 2: k * height, 3: k * width} for _ in args)
            torch.onnx.export(module, args, str(path), dynamo=True, opset_version=spec.opset, optimize=False,
                              external_data=spec.external_data, dynamic_shapes=dynamic, verbose=False, **names)
        else:
            mode = torch.onnx.TrainingMode.TRAINING if spec.training else torch.onnx.TrainingMode.EVAL
            target = torch.jit.script(module) if spec.script else module
            torch.onnx.export(target, args, str(path), dynamo=False, opset_version=spec.opset,
                              do_constant_folding=False, training=mode, **names)
    module.load_state_dict(state)
    module.train(spec.training)


def all_nodes(graph: onnx.GraphProto):
    """Every node, including those inside If/Loop/Scan subgraphs."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                yield from all_nodes(sub)


def check_graph(spec: Spec, path: pathlib.Path, inputs: dict) -> onnx.ModelProto:
    """The exported file is what this case is meant to exercise; returns the model with its data."""
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    op_types = {n.op_type for n in all_nodes(model.graph)}
    missing = set(spec.require) - op_types
    assert not missing, f"{spec.name}: exported graph lacks {sorted(missing)}; has {sorted(op_types)}"
    assert model.opset_import[0].version == spec.opset, f"{spec.name}: opset {model.opset_import[0]}"
    assert list(graph_inputs(model)) == list(inputs), f"{spec.name}: inputs {list(graph_inputs(model))}"
    assert [o.name for o in model.graph.output] == spec.outputs, f"{spec.name}: outputs {model.graph.output}"
    if spec.training:
        bns = [n for n in all_nodes(model.graph) if n.op_type == "BatchNormalization"]
        modes = [a.i for n in bns for a in n.attribute if a.name == "training_mode"]
        assert modes == [1] * len(bns), f"{spec.name}: BatchNormalization training_mode {modes}"
    if spec.dynamic_batch:
        values = list(model.graph.input) + list(model.graph.output)
        dims = [v.type.tensor_type.shape.dim[0].dim_param for v in values]
        assert all(dims), f"{spec.name}: batch dimension not symbolic: {dims}"
    if spec.dynamic_image:
        dims = [d.dim_param for v in list(model.graph.input) + list(model.graph.output)
                for d in v.type.tensor_type.shape.dim[:1] + v.type.tensor_type.shape.dim[2:]]
        assert all(dims), f"{spec.name}: batch, height and width not all symbolic: {dims}"
    if spec.external_data:
        raw = onnx.load(str(path), load_external_data=False)
        external = [t.name for t in raw.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert external and (path.parent / "model.onnx.data").is_file(), f"{spec.name}: no external data"
    return model


def parameter_map(spec: Spec, module: torch.nn.Module, model: onnx.ModelProto):
    """{torch name: initializer name} for parameters and for buffers, and the other initializers.

    A torch tensor maps to the initializer of the same name if it holds exactly the same values,
    otherwise to the one initializer that does; anything else stops the script. (Training-mode buffers
    are matched by name: see below.)"""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def find(name: str, tensor: torch.Tensor) -> str:
        value = tensor.detach().numpy()
        if name in inits and inits[name].shape == value.shape and np.array_equal(inits[name], value):
            return name
        same = [k for k, v in inits.items() if v.shape == value.shape and np.array_equal(v, value)]
        assert len(same) == 1, f"{spec.name}: torch tensor {name} matches initializers {same}"
        return same[0]
    params = {n: find(n, p) for n, p in module.named_parameters()}
    used_buffers = [(n, b) for n, b in module.named_buffers() if b.is_floating_point() and n in inits]
    if spec.training:
        # Tracing a training-mode BatchNorm runs it once, so the exporter stores running statistics one
        # momentum step on from torch's; batch-statistics outputs do not read them. Match by name.
        assert all(inits[n].shape == tuple(b.shape) for n, b in used_buffers), f"{spec.name}: buffer shapes"
        buffers = {n: n for n, _ in used_buffers}
    else:
        buffers = {n: find(n, b) for n, b in used_buffers}
    taken = list(params.values()) + list(buffers.values())
    assert len(set(taken)) == len(taken), f"{spec.name}: two torch tensors share an initializer: {taken}"
    return params, buffers, sorted(set(inits) - set(taken))


def torch_reference(spec, module, inputs, cotangents, dtype):
    """torch's outputs and the gradients of sum(output * cotangent) w.r.t. every input and parameter.

    Works on a copy (a training-mode forward updates the running statistics). Returns (outputs,
    gradients, unconnected): gradients keyed by input name or torch parameter name; torch's None
    (no path) is stored as zeros and its name listed in unconnected."""
    m = copy.deepcopy(module).to(dtype).train(spec.training)
    xs = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in inputs.items()}
    outs = m(*xs.values())
    outs = outs if isinstance(outs, tuple) else (outs,)
    if cotangents is None:
        return {k: o.detach() for k, o in zip(spec.outputs, outs)}, None, None
    loss = sum((o * torch.tensor(cotangents[k], dtype=dtype)).sum() for k, o in zip(spec.outputs, outs))
    wrt = {**xs, **dict(m.named_parameters())}
    grads = torch.autograd.grad(loss, list(wrt.values()), allow_unused=True)
    unconnected = [k for k, g in zip(wrt, grads) if g is None]
    grads = {k: (torch.zeros_like(t) if g is None else g).detach() for (k, t), g in zip(wrt.items(), grads)}
    return {k: o.detach() for k, o in zip(spec.outputs, outs)}, grads, unconnected


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def scaled_error(actual, expected) -> float:
    """max |actual - expected| over max(|expected|, 1): relative for large values, absolute for small."""
    expected = np.asarray(expected, dtype=np.float64)
    diff = np.abs(np.asarray(actual, dtype=np.float64) - expected)
    return float(diff.max() / max(float(np.abs(expected).max()), 1.0))


def with_initializers_as_inputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """A copy whose named initializers are also graph inputs, so onnxruntime lets a feed override them."""
    variant = copy.deepcopy(model)
    # onnxruntime treats the initializer-inputs of an IR 3 model as constants; from IR 4 on they are
    # overridable. The variant is only fed to onnxruntime, so lifting its IR version is harmless.
    variant.ir_version = max(variant.ir_version, 4)
    inits = {t.name: t for t in variant.graph.initializer}
    listed = {i.name for i in variant.graph.input}   # IR 3 models list every initializer as an input
    for name in [n for n in names if n not in listed]:
        t = inits[name]
        variant.graph.input.append(onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
    return variant


def verify_parameters(spec, module, inputs, model, params, grads, tolerance) -> dict:
    """Perturb each parameter in torch and the same values in its initializer in onnxruntime: the two
    outputs must agree, so the initializer plays that parameter's part. A parameter whose perturbation
    does not move the output must have a negligible gradient (listed as no_effect)."""
    sess = session(with_initializers_as_inputs(model, params.values()))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    feed = {**inputs, **{name: inits[name] for name in params.values()}}
    base, _, _ = torch_reference(spec, module, inputs, None, torch.float32)
    rng = np.random.default_rng(seed_of(spec.name) + 1)
    largest_grad = max(float(np.abs(g).max()) for g in grads.values())
    checked, no_effect = {}, []
    for tname, iname in params.items():
        value = dict(module.named_parameters())[tname].detach().numpy()
        delta = (0.5 * (np.sqrt(np.mean(value ** 2)) + 0.01) * rng.standard_normal(value.shape)).astype(np.float32)
        moved = copy.deepcopy(module)
        with torch.no_grad():
            dict(moved.named_parameters())[tname].add_(torch.from_numpy(delta))
        expected, _, _ = torch_reference(spec, moved, inputs, None, torch.float32)
        actual = sess.run(spec.outputs, {**feed, iname: value + delta})
        mismatch = max(scaled_error(a, expected[k]) for k, a in zip(spec.outputs, actual))
        effect = max(scaled_error(expected[k], base[k]) for k in spec.outputs)
        assert mismatch <= tolerance, f"{spec.name}: {tname} -> {iname}: perturbed outputs differ {mismatch:.2e}"
        if effect <= 10 * tolerance:
            gradient = float(np.abs(grads[tname]).max())
            assert gradient <= 1e-5 * largest_grad, \
                f"{spec.name}: {tname} has no effect ({effect:.2e}, tolerance {tolerance:.1e}), gradient {gradient}"
            no_effect.append(tname)
        checked[tname] = {"mismatch": float(f"{mismatch:.3g}"), "effect": float(f"{effect:.3g}")}
    return {"perturbation": checked, "no_effect": no_effect}


def check_other_batch(spec, module, model, rng) -> None:
    """The symbolic batch dimension is real: onnxruntime runs batch 3 to torch's values."""
    inputs = {k: rng.standard_normal((3,) + shape[1:]).astype(np.float32) for k, shape in spec.inputs.items()}
    expected, _, _ = torch_reference(spec, module, inputs, None, torch.float32)
    actual = session(model).run(spec.outputs, inputs)
    for k, a in zip(spec.outputs, actual):
        assert a.shape == tuple(expected[k].shape) and scaled_error(a, expected[k]) < 1e-5, f"{spec.name}: batch 3"


def other_input_arrays(spec, module, model, rng) -> dict:
    """For a model with symbolic dimensions: inputs of another shape, with torch's outputs, cotangents
    and gradients for them, keyed as expected.npz's arrays behind "other:" (and "other:in:" for the
    inputs); onnxruntime must run them to torch's outputs."""
    other = copy.copy(spec)
    other.inputs = spec.other_inputs
    inputs = make_inputs(other, rng)
    outputs, _, _ = torch_reference(other, module, inputs, None, torch.float32)
    cotangents = {k: rng.standard_normal(tuple(o.shape)).astype(np.float32) for k, o in outputs.items()}
    outputs, grads, _ = torch_reference(other, module, inputs, cotangents, torch.float32)
    params, _, _ = parameter_map(spec, module, model)
    actual = session(model).run(spec.outputs, inputs)
    for k, a in zip(spec.outputs, actual):
        assert scaled_error(a, outputs[k]) < 1e-5, f"{spec.name}: onnxruntime at {spec.other_inputs}"
    arrays = {f"other:in:{k}": v for k, v in inputs.items()}
    for k in spec.outputs:
        arrays[f"other:y:{k}"], arrays[f"other:dy:{k}"] = outputs[k].numpy(), cotangents[k]
    arrays.update({f"other:dx:{params.get(k, k)}": g.numpy() for k, g in grads.items()})
    return arrays


def graph_inputs(model: onnx.ModelProto) -> dict:
    """{name: dims} of the graph inputs that are not initializers (dims: int, or the symbol's name)."""
    inits = {t.name for t in model.graph.initializer}
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input if i.name not in inits}


def rounded(errors: dict) -> dict:
    return {k: float(f"{v:.3g}") for k, v in errors.items()}


def reference_arrays(spec, module, inputs, params, rng):
    """expected.npz's arrays plus the float32-vs-float64 gap of each, measured by rerunning torch in
    float64 (how far torch's own float32 numbers are from exact)."""
    outputs, _, _ = torch_reference(spec, module, inputs, None, torch.float32)
    cotangents = {k: rng.standard_normal(tuple(o.shape)).astype(np.float32) for k, o in outputs.items()}
    outputs, grads, unconnected = torch_reference(spec, module, inputs, cotangents, torch.float32)
    outputs64, grads64, _ = torch_reference(spec, module, inputs, cotangents, torch.float64)
    onnx_name = {**{k: k for k in inputs}, **params}
    arrays, f32_error = {}, {}
    for k in spec.outputs:
        arrays[f"y:{k}"], arrays[f"dy:{k}"] = outputs[k].numpy(), cotangents[k]
        f32_error[f"y:{k}"] = scaled_error(outputs[k], outputs64[k])
    for k, g in grads.items():
        arrays[f"dx:{onnx_name[k]}"] = g.numpy()
        f32_error[f"dx:{onnx_name[k]}"] = scaled_error(g, grads64[k])
    unconnected = [onnx_name[k] for k in unconnected]
    return arrays, {k: g.numpy() for k, g in grads.items()}, unconnected, rounded(f32_error)


def build_case(spec: Spec) -> dict:
    seed = seed_of(spec.name)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = spec.module()
    randomize_state(module, rng)
    module.train(spec.training)
    inputs = make_inputs(spec, rng)
    out_dir = HERE / spec.name
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir()
    path = out_dir / "model.onnx"
    export(spec, module, inputs, path)
    expected_files = {"model.onnx", "model.onnx.data"} if spec.external_data else {"model.onnx"}
    assert {p.name for p in out_dir.iterdir()} == expected_files, f"{spec.name}: {list(out_dir.iterdir())}"
    model = check_graph(spec, path, inputs)
    params, buffers, constants = parameter_map(spec, module, model)
    arrays, grads, unconnected, f32_error = reference_arrays(spec, module, inputs, params, rng)
    ort_outputs = dict(zip(spec.outputs, session(model).run(spec.outputs, inputs)))
    ort_error = {k: scaled_error(v, arrays[f"y:{k}"]) for k, v in ort_outputs.items()}
    tolerance = max(10 * max(ort_error.values()), 1e-6)
    verified = verify_parameters(spec, module, inputs, model, params, grads, tolerance)
    if spec.dynamic_batch:
        check_other_batch(spec, module, model, rng)
    if spec.other_inputs:
        arrays.update(other_input_arrays(spec, module, model, rng))
    arrays.update({f"ort:{k}": v for k, v in ort_outputs.items()})
    np.savez(out_dir / "inputs.npz", **inputs)
    np.savez(out_dir / "expected.npz", **arrays)
    meta = case_json(spec, seed, model, params, buffers, constants, unconnected, verified,
                     rounded(ort_error), f32_error)
    (out_dir / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def case_json(spec, seed, model, params, buffers, constants, unconnected, verified, ort_error, f32_error):
    dynamic = "batch" if spec.dynamic_batch else \
        f"batch, height and width (multiples of {spec.dynamic_image})" if spec.dynamic_image else None
    options = ({"dynamo": True, "optimize": False, "external_data": spec.external_data,
                "dynamic_shapes": dynamic} if spec.exporter == "dynamo" else
               {"dynamo": False, "do_constant_folding": False, "scripted": spec.script,
                "training": "TRAINING" if spec.training else "EVAL"})
    return {
        "name": spec.name, "description": spec.description, "seed": seed,
        "exporter": spec.exporter, "opset": spec.opset, "ir_version": model.ir_version,
        "export_options": options, "training": spec.training,
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": ort.__version__,
                     "onnxscript": __import__("onnxscript").__version__},
        "inputs": graph_inputs(model), "outputs": spec.outputs,
        "initializers_as_inputs": any(i.name in params.values() for i in model.graph.input),
        "external_data": "model.onnx.data" if spec.external_data else None,
        "op_types": sorted({n.op_type for n in all_nodes(model.graph)}),
        "xs": list(spec.inputs) + list(params.values()),
        "parameters": params, "buffers": buffers, "constants": constants,
        "unconnected": unconnected, "no_effect": [params[k] for k in verified["no_effect"]],
        "ort_error": ort_error, "float32_error": f32_error,
        "perturbation_check": verified["perturbation"], "notes": spec.notes,
        **({"other_inputs": {k: list(v) for k, v in spec.other_inputs.items()}} if spec.other_inputs else {}),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    names = parser.parse_args(argv).cases or [s.name for s in SPECS]
    torch.set_num_threads(1)
    by_name = {s.name: s for s in SPECS}
    for name in names:
        meta = build_case(by_name[name])
        print(f"{name:26s} {meta['exporter']:11s} opset {meta['opset']:2d}  params {len(meta['parameters']):3d}  "
              f"ort-vs-torch {max(meta['ort_error'].values()):.1e}  no_effect {meta['no_effect']}")
    size = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"tests/data/onnx_models: {size / 2**20:.2f} MB")
    assert size <= MAX_BYTES, f"tests/data/onnx_models is {size} bytes, over {MAX_BYTES}"


if __name__ == "__main__":
    main()
