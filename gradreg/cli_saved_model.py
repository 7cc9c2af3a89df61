"""The commands on a SavedModel directory (``gradreg inspect/run/grad/freeze DIR``), as
``saved_model_cli`` users expect: names are the signature's (npz keys are its input names,
outputs are keyed by its output names, xs are its inputs or the model's variables), variables
are restored from the directory's ``variables/``, ``--tags`` picks the MetaGraph.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg.autodiff.gradients import as_dense_gradients, gradients
from gradreg.cli_inspect import graph_summary, node_lines
from gradreg.cli_values import (
    PRINT_THRESHOLD,
    UsageError,
    as_json,
    describe,
    names,
    print_values,
    read_feeds,
    save_npz,
    suggestion,
)
from gradreg.cli_weights import parse_weights, weight_arrays, weight_tensors, zero_gradients_note
from gradreg.errors import FetchError, GradregError, SavedModelError
from gradreg.formats import format_for_path, save_graph
from gradreg.formats.gradient_saved_model import save_gradient_saved_model
from gradreg.formats.model_kinds import is_saved_model_dir
from gradreg.formats.saved_model import read_saved_model
from gradreg.formats.saved_model_loader import LoadedSavedModel, load_saved_model
from gradreg.formats.signature_graph import gradient_name, signature_gradients
from gradreg.model.dtypes import as_dtype
from gradreg.model.graph import import_graph_def


def graph_only(args: argparse.Namespace, *options: str) -> None:
    for option in options:
        if getattr(args, option, None) is not None:
            raise UsageError(f"--{option} applies to a SavedModel directory, and {args.graph} is not one")


def _open_saved_model(args: argparse.Namespace, run_init_op: bool = True) -> LoadedSavedModel:
    """The SavedModel of the command, its variables restored. run/grad/freeze run its init op
    (confined: reads inside the directory, writes only under --allow-files); inspect runs none."""
    tags = names(args.tags) if getattr(args, "tags", None) else ["serve"]
    return load_saved_model(args.graph, tags, backend=getattr(args, "backend", None), run_init_op=run_init_op)


def _signature(model: LoadedSavedModel, name: str | None) -> Any:
    if name is None:
        names = sorted(model.signatures)
        if "serving_default" in names:
            name = "serving_default"
        elif len(names) == 1:
            name = names[0]
        else:
            raise SavedModelError(f"{model.path}: choose a signature with --signature: {names}")
    return model.signatures[name]


def _info(info: Any) -> dict[str, Any]:
    """dtype, shape and tensor of a SignatureDef's TensorInfo."""
    shape = None if info.tensor_shape.unknown_rank else [d.size if d.size >= 0 else None
                                                         for d in info.tensor_shape.dim]
    try:
        dtype = as_dtype(info.dtype).name if info.dtype else "?"
    except GradregError:
        dtype = f"<DataType {info.dtype}>"     # a hostile file's enum: shown, not trusted
    return {"dtype": dtype, "shape": shape, "tensor": info.name or info.WhichOneof("encoding")}


def saved_model_summary(model: LoadedSavedModel) -> dict[str, Any]:
    """What ``gradreg inspect DIR --json`` prints."""
    signatures = {}
    for name in sorted(model.signatures):
        definition = model.signatures[name].definition
        signatures[name] = {"method": definition.method_name,
                            "inputs": {e.key: _info(e.value) for e in sorted(definition.inputs, key=lambda e: e.key)},
                            "outputs": {e.key: _info(e.value) for e in sorted(definition.outputs,
                                                                              key=lambda e: e.key)}}
    variables = {name: {"dtype": v.variable.dtype.name, "shape": v.variable.shape.as_list(),
                        "trainable": v.trainable, "checkpoint_key": v.source.key}
                 for name, v in model.model_variables.items()}
    meta_graphs = read_saved_model(model.path).meta_graphs
    return {"path": model.path, "tags": list(model.tags),
            "tag_sets": [sorted(m.meta_info_def.tags) for m in meta_graphs],
            "tensorflow_version": model.meta_graph.meta_info_def.tensorflow_version or None,
            "object_graph": model.is_tf2, "signatures": signatures, "variables": variables}


def _shape_str(shape: list[int | None] | None) -> str:
    return "<unknown rank>" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def inspect_saved_model(args: argparse.Namespace) -> int:
    model = _open_saved_model(args, run_init_op=False)       # a read-only command runs no op of the model
    summary = saved_model_summary(model)
    if getattr(args, "nodes", False):      # the nodes of the MetaGraph's graph, as for a graph file
        summary["node_list"] = graph_summary(model.graph, nodes=True)["node_list"]
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    kind = "TF2 (object graph)" if summary["object_graph"] else "TF1 (collections)"
    print(f"SavedModel: {model.path}")
    print(f"  tag-sets: {'; '.join(','.join(tags) for tags in summary['tag_sets'])}")
    written = f", written by TensorFlow {summary['tensorflow_version']}" if summary["tensorflow_version"] else ""
    print(f"  MetaGraph: tags {','.join(model.tags)}, {kind}{written}")
    for name, signature in summary["signatures"].items():
        print(f"signature '{name}'  ({signature['method'] or 'no method name'})")
        for kind_name in ("inputs", "outputs"):
            print(f"  {kind_name}:")
            for key, info in signature[kind_name].items():
                print(f"    {key}  {info['dtype']} {_shape_str(info['shape'])}  ({info['tensor']})")
    print(f"variables ({len(summary['variables'])}):")
    for name, var in summary["variables"].items():
        trainable = "trainable" if var["trainable"] else "not trainable"
        print(f"  {name}  {var['dtype']} {_shape_str(var['shape'])}  {trainable}  ({var['checkpoint_key']})")
    if "node_list" in summary:
        print("nodes (name  op(inputs) -> outputs):")
        for line in node_lines(summary):
            print("  " + line)
    return 0


def _no_checkpoint(args: argparse.Namespace) -> None:
    if getattr(args, "checkpoint", None):
        raise UsageError("--checkpoint applies to graph files: a SavedModel restores its own variables/")


def _signature_feeds(specs: Sequence[str], signature: Any = None) -> dict[str, np.ndarray]:
    """Feeds keyed by signature input name: npz keys as they are, NAME=FILE.npy or NAME=VALUE
    (a value gets the dtype of the signature's input)."""
    dtypes = {}
    if signature is not None:
        for key, tensor in signature.inputs.items():
            with contextlib.suppress(GradregError, AttributeError):
                dtypes[key] = tensor.dtype.base_dtype.storage
    return read_feeds(specs, dtypes=dtypes)


def run_saved_model(args: argparse.Namespace) -> int:
    _no_checkpoint(args)
    model = _open_saved_model(args)
    signature = _signature(model, args.signature)
    outputs = [n for spec in args.fetch or [] for n in names(spec)] or None
    values = signature.run(_signature_feeds(args.feed, signature), outputs)
    if args.json:
        print(json.dumps({"outputs": [as_json(n, v) for n, v in values.items()]}))
    else:
        print_values(list(values.items()), getattr(args, "threshold", PRINT_THRESHOLD))
    if args.output:
        save_npz(args.output, values)
        if not args.json:
            print(f"wrote {len(values)} arrays to {args.output}")
    return 0


def _grad_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options grad takes for a SavedModel (UsageError for the others); the --grad-ys
    weights, which are values keyed by output name."""
    if args.stop:
        raise UsageError("--stop applies to graph files, not to SavedModel directories")
    weights, tensors = parse_weights(args.grad_ys)
    if tensors:
        raise UsageError(f"--grad-ys {','.join(tensors)}: a SavedModel's ys are weighted by values, "
                         f"NAME=VALUE, NAME=FILE.npy or FILE.npz keyed by output name")
    if getattr(args, "dask", None) is not None:
        raise UsageError("--dask applies to graph files, not to SavedModel directories")
    _no_checkpoint(args)
    if args.freeze and not args.output:
        raise UsageError("--freeze applies to -o GRAPH (the gradient graph written)")
    return weights


def grad_saved_model(args: argparse.Namespace) -> int:
    weights = _grad_options(args)
    model = _open_saved_model(args)
    signature = _signature(model, args.signature)
    ys = [_signature_part(signature.outputs, n, "output", signature.name) for n in names(args.ys)]
    x_names = names(args.xs)
    xs = [signature.inputs[n] if n in signature.inputs else _variable(model, signature, n) for n in x_names]
    grad_ys = weight_tensors(model.graph, ys, [[n] for n in names(args.ys)], weights) if weights else None
    with model.graph.as_default():
        grads = as_dense_gradients(gradients(ys, xs, grad_ys=grad_ys, unconnected_gradients=args.unconnected,
                                             custom_gradient=args.custom_gradient,
                                             symmetric_inputs=args.symmetric_inputs))
    mapping = {x: (g.name if g is not None else None) for x, g in zip(x_names, grads)}
    values: dict[str, Any] = {}
    if args.feed:
        feeds = {signature.inputs[k]: v for k, v in _signature_feeds(args.feed, signature).items()
                 if _signature_part(signature.inputs, k, "input", signature.name) is not None}
        fetched = model.session.run([*ys, *[g for g in grads if g is not None]], feeds)
        values = dict(zip([*names(args.ys), *[x for x, g in zip(x_names, grads) if g is not None]], fetched))
        note = None if grad_ys else zero_gradients_note(fetched[len(ys):], names(args.ys))
        if note:
            print(f"gradreg grad: note: {note}", file=sys.stderr)
    if args.output:
        arrays = weight_arrays(ys, names(args.ys), weights) if weights else None
        mapping = _write_gradients(args, model, signature, values, x_names, bool(args.feed), arrays) or mapping
    if args.json:
        document: dict[str, Any] = {"gradients": mapping}
        if values:    # keyed as on the command line: the ys' output names, each x's name
            document["values"] = [as_json(name, value) for name, value in values.items()]
        print(json.dumps(document))
        return 0
    threshold = getattr(args, "threshold", PRINT_THRESHOLD)
    for y in names(args.ys):
        if y in values:
            print(describe(y, values[y], threshold))
    for x, g in mapping.items():
        print(f"d/d{x}: none (not connected)" if g is None else
              f"d/d{x}: {describe(g, values[x], threshold)}" if x in values else f"d/d{x}: {g}")
    return 0


def _signature_part(table: dict[str, Any], name: str, kind: str, signature: str) -> Any:
    if name not in table:
        raise FetchError(f"signature '{signature}' has no {kind} '{name}'; its {kind}s are {sorted(table)}"
                         f"{suggestion(name, table)}")
    return table[name]


def _variable(model: LoadedSavedModel, signature: Any, name: str) -> Any:
    variables = model.variables
    if name not in variables:
        raise FetchError(f"--xs {name!r} is neither an input of signature '{signature.name}' "
                         f"({sorted(signature.inputs)}) nor a variable ({sorted(variables)})"
                         f"{suggestion(name, [*signature.inputs, *variables])}")
    return variables[name]


def _write_gradients(args: argparse.Namespace, model: LoadedSavedModel, signature: Any, values: dict[str, Any],
                     x_names: list[str], evaluated: bool,
                     weights: dict[str, Any] | None = None) -> dict[str, str | None] | None:
    """-o OUT.npz: the gradients' values; -o OUTDIR/ (or an existing directory): a copy of the
    SavedModel with a gradients signature; -o OUT.pb (any graph format): the signature's flat
    gradient graph (gradreg.formats.signature_graph), its variables as constants with --freeze.
    ``weights``: the --grad-ys arrays by y. Returns each x's gradient's name in what was written
    (None for the npz)."""
    path = args.output
    if path.lower().endswith(".npz"):
        if not evaluated:
            raise UsageError("-o OUT.npz saves the gradients' values: give --feed with the signature's inputs")
        arrays = {x: np.asarray(values[x]) for x in x_names if x in values}
        save_npz(path, arrays)
        print(f"wrote {len(arrays)} gradients to {path} (keyed by x)")
        return None
    flat = signature_gradients(model, names(args.ys), x_names, signature=signature.name, grad_ys=weights,
                               unconnected_gradients=args.unconnected, custom_gradient=args.custom_gradient)
    fetched = ", ".join(sorted(flat.fetches))
    written = {x: gradient_name(x) if flat.gradients.get(x) is not None else None for x in x_names}
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        if args.freeze:
            raise UsageError("--freeze applies to -o GRAPH: a SavedModel keeps its variables")
        save_gradient_saved_model(model, flat, path)
        print(f"wrote {path}: the SavedModel with signature 'gradients' (inputs {', '.join(sorted(flat.inputs))}; "
              f"outputs {fetched})")
        return written
    chosen = format_for_path(path)
    if chosen is not None and chosen.write_outputs is not None:     # a model format (ONNX): no variables
        frozen = import_graph_def(flat.graph_def(freeze=True), source=path)
        save_graph(frozen, path, chosen.name, outputs={k: frozen.get_tensor(t.name) for k, t in flat.fetches.items()})
        print(f"wrote {path} (outputs {fetched})")
        return written
    graph_def = flat.graph_def(freeze=args.freeze)
    save_graph(graph_def, path)
    how = "variables as constants" if args.freeze else f"variables restored by: --checkpoint {model.path}"
    print(f"wrote {path} ({len(graph_def.node)} nodes, functions inlined; feed {', '.join(sorted(flat.inputs))}; "
          f"fetch {fetched}; {how})")
    return written


def cmd_freeze(args: argparse.Namespace) -> int:
    if not is_saved_model_dir(args.graph):
        raise UsageError(f"{args.graph}: freeze takes a SavedModel directory")
    model = _open_saved_model(args)
    signature = _signature(model, args.signature)
    frozen = model.freeze(signature.name)
    save_graph(frozen, args.output)
    print(f"wrote {args.output} ({len(frozen.node)} nodes, {len(frozen.library.function)} functions; "
          f"feed {', '.join(f'{k}:0' for k in sorted(signature.inputs))}; "
          f"fetch {', '.join(f'{k}:0' for k in sorted(signature.outputs))})")
    return 0
