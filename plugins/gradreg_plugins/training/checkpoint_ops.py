"""Checkpoint ops: what TensorFlow's savers put in graphs and SavedModels.

RestoreV2 / SaveV2 / MergeV2Checkpoints read and write tensor bundles (gradreg.formats
.tensor_bundle), so a TF1 graph's ``save/restore_all`` and a SavedModel's restore and save
functions run as they do in TensorFlow; ShardedFilename, ShardedFilespec, StringJoin,
StaticRegexFullMatch and DisableCopyOnRead are the string plumbing around them. None is
differentiable.

The three file ops declare what they do to files (``files=``) and touch a file only through
``ctx.file_path``: a graph read from a file reads only inside that file's model root, and
writes or deletes only under directories the caller granted (gradreg.file_access,
docs/security.md). A relative prefix joins the model's directory."""
from __future__ import annotations

import os
import re

import numpy as np

from gradreg.errors import CheckpointError, ExecutionError, describe_node
from gradreg.formats.tensor_bundle import BundleReader, data_path, index_path, slice_region, write_bundle
from gradreg.model import shape_fns as sf
from gradreg.model.shapes import TensorShape
from gradreg.registry.kernels import NOOP
from gradreg_plugins.training import family

op = family.op
kernel = family.kernel

_IO = ["prefix: string", "tensor_names: string", "shape_and_slices: string"]


def _restore_shapes(ctx):
    return [TensorShape(None)] * len(ctx.attr("dtypes"))


op("RestoreV2", inputs=_IO, outputs=["tensors: dtypes"], attrs=["dtypes: list(type) >= 1"],
   shape=_restore_shapes, stateful=True, files=("read",))
op("SaveV2", inputs=[*_IO, "tensors: dtypes"], attrs=["dtypes: list(type) >= 1"], stateful=True,
   files=("write", "delete"))
op("MergeV2Checkpoints", inputs=["checkpoint_prefixes: string", "destination_prefix: string"],
   attrs=["delete_old_dirs: bool = true", "allow_missing_files: bool = false"], stateful=True,
   files=("read", "write", "delete"))
op("ShardedFilename", inputs=["basename: string", "shard: int32", "num_shards: int32"],
   outputs=["filename: string"], shape=sf.scalar)
op("ShardedFilespec", inputs=["basename: string", "num_shards: int32"], outputs=["filename: string"],
   shape=sf.scalar)
op("StringJoin", inputs=["inputs: N * string"], outputs=["output: string"],
   attrs=["N: int >= 0", "separator: string = ''"], shape=sf.broadcast_all)
op("StaticRegexFullMatch", inputs=["input: string"], outputs=["output: bool"], attrs=["pattern: string"],
   shape=sf.unchanged)
op("DisableCopyOnRead", inputs=["resource: resource"], stateful=True)

family.not_differentiable("RestoreV2", "SaveV2", "MergeV2Checkpoints", "ShardedFilename", "ShardedFilespec",
                          "StringJoin", "StaticRegexFullMatch", "DisableCopyOnRead")


def _text(value) -> str:
    value = np.asarray(value, dtype=object).reshape(-1)
    if value.size != 1:
        raise ValueError(f"expected one string, got {value.size}")
    item = value[0]
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


def _texts(value) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v)
            for v in np.asarray(value, dtype=object).reshape(-1)]


@kernel("RestoreV2")
def _restore_v2(op, ctx):
    wanted = op.get_attr("dtypes")

    def restore(prefix, names, specs):
        reader = BundleReader(_text(prefix), lambda path: ctx.file_path(op, path, "read"))
        names, specs = _texts(names), _texts(specs)
        if len(names) != len(wanted) or len(specs) != len(wanted):
            raise ExecutionError(f"{describe_node(op.name, op.type)}: {len(names)} names and {len(specs)} slices "
                                 f"for {len(wanted)} tensors", op.name, op.type)
        out = []
        for name, spec, dtype in zip(names, specs, wanted):
            if name not in reader:
                raise CheckpointError(f"{reader.prefix}: no tensor '{name}' ({describe_node(op.name, op.type)})")
            if reader.dtype(name) is not dtype.base_dtype:
                raise CheckpointError(f"{reader.prefix}: tensor '{name}' is {reader.dtype(name).name}, "
                                      f"{describe_node(op.name, op.type)} restores it as {dtype.name}")
            value = reader.read(name)
            out.append(value[slice_region(spec, value.shape, name)] if spec else value)
        return out[0] if len(out) == 1 else out
    return restore


@kernel("SaveV2")
def _save_v2(op, ctx):
    dtypes_ = op.get_attr("dtypes")

    def save(prefix, names, specs, *tensors):
        names, specs = _texts(names), _texts(specs)
        write_bundle(_writable_prefix(op, ctx, _text(prefix)), _whole_tensors(op, names, specs, tensors),
                     {n: d for n, d in zip(names, dtypes_) if d.name == "bfloat16"})
    return save


def _writable_prefix(op, ctx, prefix: str) -> str:
    """The resolved prefix of a bundle ``op`` writes: its directory, its index and its one data
    shard must be writable (no link out of the granted directories), and stale shards of the
    prefix, which write_bundle removes, deletable."""
    resolved = ctx.file_path(op, prefix, "write")
    for path in (index_path(resolved), data_path(resolved, 0, 1)):
        ctx.file_path(op, path, "write")
    ctx.file_path(op, os.path.dirname(resolved), "delete")
    return resolved


def _whole_tensors(op, names, specs, tensors) -> dict:
    """The tensors to write by name: the slices of a partitioned variable assembled into the
    whole tensor (which RestoreV2 reads slices of, in TensorFlow as in gradreg)."""
    out: dict[str, np.ndarray] = {}
    covered: dict[str, np.ndarray] = {}
    for name, spec, value in zip(names, specs, tensors):
        if not spec:
            out[name] = value
            continue
        shape = tuple(int(d) for d in spec.split(" ")[:-1])
        whole = out.setdefault(name, np.zeros(shape, np.asarray(value).dtype))
        mask = covered.setdefault(name, np.zeros(shape, bool))
        region = slice_region(spec, shape, name)
        whole[region] = value
        mask[region] = True
    for name, mask in covered.items():
        if not mask.all():
            raise ExecutionError(f"{describe_node(op.name, op.type)}: the slices of '{name}' do not cover it",
                                 op.name, op.type)
    return out


@kernel("MergeV2Checkpoints")
def _merge_v2(op, ctx):
    delete_old = op.get_attr("delete_old_dirs")
    allow_missing = op.get_attr("allow_missing_files")

    def merge(sources, destination):
        tensors, kinds = {}, {}
        # Every path is checked before anything is read, written or deleted.
        sources = [_readable_and_deletable(op, ctx, prefix) for prefix in _texts(sources)]
        destination = _writable_prefix(op, ctx, _text(destination))
        for prefix in sources:
            if allow_missing and not os.path.exists(index_path(prefix)):
                continue
            reader = BundleReader(prefix, lambda path: ctx.file_path(op, path, "read"))
            for key in reader:
                tensors[key] = reader.read(key)
                kinds[key] = reader.dtype(key)
        write_bundle(destination, dict(sorted(tensors.items())), kinds)
        for prefix in sources:
            _remove_bundle(op, ctx, prefix, delete_old)
    return merge


def _readable_and_deletable(op, ctx, prefix: str) -> str:
    ctx.file_path(op, prefix, "delete")
    return ctx.file_path(op, prefix, "read")


def _remove_bundle(op, ctx, prefix: str, remove_directory: bool) -> None:
    directory, base = os.path.split(prefix)       # resolved and checked already
    for name in os.listdir(directory) if os.path.isdir(directory) else ():
        if name == base + ".index" or name.startswith(base + ".data-"):
            path = os.path.join(directory, name)
            ctx.file_path(op, path, "delete")      # a link may lead out: then nothing is removed
            os.unlink(path)
    if remove_directory and os.path.isdir(directory) and not os.listdir(directory):
        os.rmdir(ctx.file_path(op, directory, "delete"))


@kernel("ShardedFilename")
def _sharded_filename(op, ctx):
    return lambda base, shard, n: np.array(f"{_text(base)}-{int(shard):05d}-of-{int(n):05d}".encode(), dtype=object)


@kernel("ShardedFilespec")
def _sharded_filespec(op, ctx):
    return lambda base, n: np.array(f"{_text(base)}-?????-of-{int(n):05d}".encode(), dtype=object)


@kernel("StringJoin")
def _string_join(op, ctx):
    separator = op.get_attr("separator")
    separator = separator if isinstance(separator, bytes) else str(separator).encode()

    def join(*parts):
        arrays = np.broadcast_arrays(*[np.asarray(p, dtype=object) for p in parts])
        if not arrays:
            return np.array(b"", dtype=object)
        out = np.empty(arrays[0].shape, dtype=object)
        for index in np.ndindex(out.shape):
            out[index] = separator.join(bytes(a[index]) for a in arrays)
        return out
    return join


@kernel("StaticRegexFullMatch")
def _static_regex_full_match(op, ctx):
    pattern = op.get_attr("pattern")
    compiled = re.compile(pattern if isinstance(pattern, bytes) else str(pattern).encode())

    def full_match(values):
        values = np.asarray(values, dtype=object)
        return np.vectorize(lambda v: compiled.fullmatch(bytes(v)) is not None, otypes=[np.bool_])(values) \
            if values.size else np.zeros(values.shape, np.bool_)
    return full_match


kernel("DisableCopyOnRead")(lambda op, ctx: NOOP)
