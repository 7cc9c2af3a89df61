"""Model-file jobs of the fuzzer (issue 27): SavedModel directories, TensorFlow checkpoint directories,
gradreg ``.npz`` checkpoints and ONNX files with external data, mutated as an attacker would write
them, then loaded, inspected, run, saved and cleaned up as a user would.

A job works in a directory of its own::

    job/model/     the mutant (a copy of a seed from tests/data, then mutated)
    job/outside/   what must never be read, written or deleted: a bundle and a raw data file whose
                   every value is SENTINEL, with the seed's keys and sizes, and precious.txt
    job/out/       where the caller lets gradreg write (-o, save paths)
    job/cwd/       the working directory while the job runs: it must stay empty

Mutations are structure-aware (the graph of a SavedModel's MetaGraph through the graph mutators, an
init op with file ops naming outside paths, signatures, the object graph, a checkpoint state file's
paths, external-data locations, offsets and lengths, hostile .npz members) or bytes-level, plus link
tricks: a file or ``variables/`` replaced by a symbolic link or a hard link to its outside twin, a link
to a device, a FIFO where a file should be.

The oracle adds one failure to the graph fuzzer's: ``escape`` — a file outside changed or appeared,
the working directory got a file, or a SENTINEL value came back (in a variable, a Const or an output).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import random
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf import text_format

from gradreg.errors import CheckpointError

from .feeds import hostile_feed
from .mutate import Mutant, make_mutant, mutate_bytes
from .oracle import FuzzTimeout, Verdict, classify_error, time_limit
from .seeds import DATA, Seed

SENTINEL = 31337.0
KINDS = ("saved_model", "tf_checkpoint", "npz_checkpoint", "onnx")
SAVED_MODELS = ["checkpoints/saved_module", "saved_model_io/tf1_model", "saved_model_io/tf2_embedding",
                "tf_models/saved_models/keras_export/model", "tf_models/saved_models/module_two_signatures/model",
                "tf_models/saved_models/while_loop/model"]
TF_CHECKPOINTS = ["checkpoints/tf1", "tf_models/saved_models/v1_checkpoint"]
ONNX_MODELS = ["onnx_models/external_data_opset18", "onnx_models/mlp_gelu_opset18"]


@dataclass
class ModelJob:
    """A model mutant: its kind, the seed it came from and what was done to it. ``build`` writes it."""
    kind: str
    seed: str
    how: list[str] = field(default_factory=list)
    actions: list[tuple[str, Any]] = field(default_factory=list)   # applied in order by build()


def generate_model_job(rng: random.Random) -> ModelJob:
    kind = rng.choice(KINDS)
    seeds = {"saved_model": SAVED_MODELS, "tf_checkpoint": TF_CHECKPOINTS, "onnx": ONNX_MODELS,
             "npz_checkpoint": ["(a gradreg Saver's directory)"]}[kind]
    job = ModelJob(kind, rng.choice(seeds))
    for _ in range(rng.choice([1, 1, 2, 3])):
        pick = rng.choice(_MUTATIONS[kind])
        job.actions.append((pick, rng.random()))
    job.how = [name for name, _ in job.actions]
    return job


# -- building the job's directories -----------------------------------------------------------------
def build(job: ModelJob, place: str) -> str:
    """Write the job's directories under ``place``; returns the model's path (a directory, or the
    ONNX file)."""
    base = pathlib.Path(place)
    for name in ("model", "outside", "out", "cwd"):
        (base / name).mkdir(parents=True, exist_ok=True)
    model = base / "model"
    if job.kind == "npz_checkpoint":
        _npz_seed(model)
    else:
        shutil.copytree(DATA / job.seed, model, dirs_exist_ok=True)
        if job.kind == "onnx":
            _external_data(model)
    _outside_twins(model, base / "outside")
    (base / "outside" / "precious.txt").write_text("do not touch")
    os.symlink("/dev/zero", base / "outside" / "link-to-dev-zero")
    for index, (name, roll) in enumerate(job.actions):
        rng = random.Random(f"{job.seed}:{index}:{roll}")
        described = _APPLY[name](rng, model, base / "outside")
        if described:
            job.how[index] = f"{name}: {described}"
    return str(model / "model.onnx") if job.kind == "onnx" else str(model)


def _npz_seed(model: pathlib.Path) -> None:
    import gradreg as gr
    graph = gr.Graph()
    with graph.as_default():
        v = gr.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="v")
        step = gr.Variable(np.int64(3), name="step")
    session = gr.Session(graph)
    session.run([v.initializer, step.initializer])
    saver = gr.train.Saver([v, step], max_to_keep=3)
    for step in range(2):
        saver.save(session, str(model / "model"), global_step=step)


def _external_data(model: pathlib.Path) -> None:
    """An ONNX seed whose initializers are all in model.onnx.data (the exporter's layout)."""
    import onnx
    path = model / "model.onnx"
    proto = onnx.load(str(path), load_external_data=True)
    onnx.save(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)


def _outside_twins(model: pathlib.Path, outside: pathlib.Path) -> None:
    """For each file of the model, a twin outside with the same name and layout but SENTINEL values:
    a link to it that is followed brings SENTINEL back."""
    from gradreg.formats.tensor_bundle import BundleReader, write_bundle
    for path in sorted(model.rglob("*.index")):
        prefix = str(path)[:-len(".index")]
        try:
            reader = BundleReader(prefix)
            values = {}
            for key in reader:
                value = reader.read(key)
                values[key] = np.full(value.shape, SENTINEL, value.dtype) if value.dtype.kind == "f" else value
        except Exception:
            continue
        twin = outside / path.relative_to(model)
        twin.parent.mkdir(parents=True, exist_ok=True)
        write_bundle(str(twin)[:-len(".index")], values)
    for path in sorted(model.rglob("*")):
        twin = outside / path.relative_to(model)
        if path.is_file() and not twin.exists():
            twin.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix in (".data", ".bin") or path.name.endswith(".onnx.data"):
                twin.write_bytes(np.full(path.stat().st_size // 4 + 1, SENTINEL, np.float32).tobytes())
            else:
                shutil.copyfile(path, twin)


# -- mutations ---------------------------------------------------------------------------------------
def _files(model: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in model.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_nlink == 1)


def _symlink_out(rng, model, outside):
    path = rng.choice(_files(model))
    twin = outside / path.relative_to(model)
    path.unlink()
    os.symlink(twin, path)
    return str(path.relative_to(model))


def _hardlink_out(rng, model, outside):
    path = rng.choice(_files(model))
    twin = outside / path.relative_to(model)
    if not twin.exists():
        return None
    path.unlink()
    try:
        os.link(twin, path)
    except OSError:
        os.symlink(twin, path)
        return f"{path.relative_to(model)} (symbolic: no hard links here)"
    return str(path.relative_to(model))


def _directory_out(rng, model, outside):
    directories = sorted(p for p in model.rglob("*") if p.is_dir() and not p.is_symlink())
    if not directories:
        return None
    path = rng.choice(directories)
    shutil.rmtree(path)
    os.symlink(outside / path.relative_to(model), path)
    return str(path.relative_to(model))


def _special_file(rng, model, outside):
    # Not the model file itself: the caller named that one (a FIFO there is `gradreg run <(...)`).
    files = [p for p in _files(model) if p.name != "model.onnx"]
    if not files:
        return None
    path = rng.choice(files)
    path.unlink()
    choice = rng.choice(["fifo", "dev/zero", "dev/urandom", "directory", "proc"])
    if choice == "fifo":
        os.mkfifo(path)
    elif choice == "directory":
        path.mkdir()
    elif choice == "proc":
        os.symlink("/proc/self/environ", path)
    else:
        os.symlink("/" + choice, path)
    return f"{path.relative_to(model)} -> {choice}"


def _flip_bytes(rng, model, outside):
    path = rng.choice(_files(model))
    data, how = mutate_bytes(rng, path.read_bytes(), b"")
    path.write_bytes(data)
    return f"{path.relative_to(model)}: {how}"


def _truncate(rng, model, outside):
    path = rng.choice(_files(model))
    data = path.read_bytes()
    path.write_bytes(data[:rng.randrange(len(data) + 1)])
    return f"{path.relative_to(model)} cut"


def _hostile_path(rng, outside: pathlib.Path) -> str:
    # Absolute paths only into ``outside``: a run with the confinement off (to check that the oracle sees
    # escapes, GRADREG_ALLOW_FILES=/) must not write anywhere else on the machine.
    return rng.choice([str(outside / "secret"), "../outside/secret", "../../outside/secret", "link/secret",
                       str(outside / "link-to-dev-zero"), "variables/../../outside/secret", "", "\u2603/x", "a" * 300,
                       str(outside / "precious.txt")])


# SavedModel: its MetaGraph's graph, an init op with file ops, signatures, the object graph.
def _saved_model_proto(model: pathlib.Path):
    from gradreg.proto import saved_model_pb2
    if not (model / "saved_model.pb").is_file():      # a FIFO or a link made by an earlier mutation
        raise ValueError("saved_model.pb is not a file any more")
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((model / "saved_model.pb").read_bytes())
    return proto


def _write_saved_model(model: pathlib.Path, proto) -> None:
    (model / "saved_model.pb").write_bytes(proto.SerializeToString())


def _mutate_meta_graph(rng, model, outside):
    try:
        proto = _saved_model_proto(model)
    except Exception:
        return None
    meta = proto.meta_graphs[0]
    outputs = [o.value.name for s in meta.signature_def for o in s.value.outputs if o.value.name]
    seed = Seed("saved_model", meta.graph_def, {}, outputs[:2])
    mutant: Mutant = make_mutant(rng, seed, seed, {})
    from gradreg.proto import graph_pb2
    graph_def = graph_pb2.GraphDef()
    try:
        if mutant.suffix == ".pbtxt":
            text_format.Parse(mutant.data.decode("utf-8", "replace"), graph_def)
        else:
            graph_def.ParseFromString(mutant.data)
    except Exception:
        (model / "saved_model.pb").write_bytes(mutant.data)    # not a GraphDef any more: bytes as they are
        return "; ".join(mutant.how) + " (as the whole file)"
    meta.graph_def.CopyFrom(graph_def)
    _write_saved_model(model, proto)
    return "; ".join(mutant.how)


def _init_op_with_file_ops(rng, model, outside):
    try:
        proto = _saved_model_proto(model)
    except Exception:
        return None
    meta = proto.meta_graphs[0]
    op = rng.choice(["SaveV2", "RestoreV2", "MergeV2Checkpoints"])
    path = _hostile_path(rng, outside)
    if path.startswith("link/"):
        os.symlink(outside, model / "link")
    text = _file_op_nodes(op, path, str(outside / "merged"))
    from gradreg.proto import graph_pb2
    extra = text_format.Parse(text, graph_pb2.GraphDef())
    meta.graph_def.node.extend(extra.node)
    init = _entry(meta.signature_def, "__saved_model_init_op")
    _entry(init.outputs, "__saved_model_init_op").name = "fuzz_init"
    _write_saved_model(model, proto)
    return f"{op} on '{path}'"


def _entry(entries, key: str):
    """The value of ``key`` in a map stored as repeated key/value entries (gradreg's protos), added if missing."""
    for entry in entries:
        if entry.key == key:
            return entry.value
    entry = entries.add()
    entry.key = key
    return entry.value


def _file_op_nodes(op: str, path: str, destination: str) -> str:
    def const(name, values, vector=True):
        dims = f"dim {{ size: {len(values)} }}" if vector else ""
        vals = " ".join(f"string_val: {json.dumps(v)}" for v in values)
        return (f'node {{ name: "{name}" op: "Const" attr {{ key: "dtype" value {{ type: DT_STRING }} }} '
                f'attr {{ key: "value" value {{ tensor {{ dtype: DT_STRING tensor_shape {{ {dims} }} {vals} }} }} }} '
                '}\n')
    nodes = const("fuzz_prefix", [path], vector=False) + const("fuzz_names", ["w"]) + const("fuzz_slices", [""])
    nodes += ('node { name: "fuzz_w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } '
              'attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 1 } } } }\n')
    if op == "SaveV2":
        nodes += ('node { name: "fuzz_op" op: "SaveV2" input: "fuzz_prefix" input: "fuzz_names" input: "fuzz_slices" '
                  'input: "fuzz_w" attr { key: "dtypes" value { list { type: DT_FLOAT } } } }\n')
    elif op == "RestoreV2":
        nodes += ('node { name: "fuzz_op" op: "RestoreV2" input: "fuzz_prefix" input: "fuzz_names" '
                  'input: "fuzz_slices" attr { key: "dtypes" value { list { type: DT_FLOAT } } } }\n')
    else:
        nodes += const("fuzz_sources", [path]) + const("fuzz_destination", [destination], vector=False)
        nodes += ('node { name: "fuzz_op" op: "MergeV2Checkpoints" input: "fuzz_sources" '
                  'input: "fuzz_destination" }\n')
    return nodes + 'node { name: "fuzz_init" op: "NoOp" input: "^fuzz_op" }\n'


def _mutate_signatures(rng, model, outside):
    try:
        proto = _saved_model_proto(model)
    except Exception:
        return None
    signatures = {e.key: e.value for e in proto.meta_graphs[0].signature_def}
    if not signatures:
        return None
    key = rng.choice(sorted(signatures))
    entry = signatures[key]
    tensors = [e.value for e in entry.inputs] + [e.value for e in entry.outputs]
    if not tensors:
        return None
    info = rng.choice(tensors)
    change = rng.choice(["name", "dtype", "shape", "drop"])
    if change == "name":
        info.name = rng.choice(["nowhere:0", "x:99", "", ":", "^ctrl", "a" * 1000 + ":0"])
    elif change == "dtype":
        info.dtype = rng.choice([0, 7, 21, 23, 99, 1000])
    elif change == "shape":
        info.tensor_shape.Clear()
        info.tensor_shape.dim.add().size = rng.choice([-7, 0, 2**62, 10**9])
    else:
        info.ClearField("name")
    _write_saved_model(model, proto)
    return f"signature '{key}': {change}"


def _mutate_object_graph(rng, model, outside):
    try:
        proto = _saved_model_proto(model)
    except Exception:
        return None
    nodes = proto.meta_graphs[0].object_graph_def.nodes
    if not nodes:
        return None
    node = rng.choice(nodes)
    children = list(node.children)
    if children and rng.random() < 0.6:
        rng.choice(node.children).node_id = rng.choice([0, len(nodes), 2**31 - 1, nodes.__len__() - 1])
        what = "a child's node id"
    else:
        child = node.children.add()
        child.node_id = 0
        child.local_name = "loop"
        what = "a child back to the root"
    _write_saved_model(model, proto)
    return what


def _text_saved_model(rng, model, outside):
    if not (model / "saved_model.pb").exists():
        return None
    try:
        proto = _saved_model_proto(model)
    except Exception:
        return None
    text = text_format.MessageToString(proto)
    if rng.random() < 0.5:
        depth = rng.choice([150, 2000, 20000])
        text = "meta_graphs { " * depth + "}" * depth
    (model / "saved_model.pb").unlink()
    (model / "saved_model.pbtxt").write_text(text)
    return "saved_model.pbtxt"


# Checkpoint directories: the state file's paths, its bytes.
def _state_file_paths(rng, model, outside):
    state = model / "checkpoint"
    path = _hostile_path(rng, outside)
    if path.startswith("link/"):
        os.symlink(outside, model / "link")
    if state.is_symlink() or (state.exists() and not state.is_file()):
        state.unlink() if not state.is_dir() else shutil.rmtree(state)
    if (model / "model-0.npz").exists() or state.is_file() and state.read_bytes().startswith(b"{"):
        state.write_text(json.dumps({"latest": path, "all": [path, str(outside / "precious.txt"), "model-0.npz"]}))
    else:
        state.write_text(f'model_checkpoint_path: {json.dumps(path)}\nall_model_checkpoint_paths: {json.dumps(path)}\n'
                         f'all_model_checkpoint_paths: "{outside}/precious"\n')
    return path


def _state_file_garbage(rng, model, outside):
    state = model / "checkpoint"
    if state.is_symlink() or (state.exists() and not state.is_file()):
        state.unlink() if not state.is_dir() else shutil.rmtree(state)
    state.write_bytes(rng.choice([b"\xff\xfe\x80garbage", b"model_checkpoint_path: {{{", b"x" * (2 << 20),
                                  b'{"all": "not a list"}', b'{"all": [1, null, {"a": 2}]}', b""]))
    return "state file garbage"


def _hostile_npz_member(rng, model, outside):
    files = sorted(p for p in model.glob("*.npz") if p.is_file() and not p.is_symlink())
    if not files:
        return None
    path = rng.choice(files)
    data, _, how, _ = hostile_feed(rng, {"v": np.zeros((2, 3), np.float32), "step": np.int64(0)})
    path.write_bytes(data)
    return f"{path.name}: {how}"


# ONNX: external-data entries.
def _external_location(rng, model, outside):
    import onnx
    path = model / "model.onnx"
    if not path.is_file():
        return None
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:
        return None
    tensors = [t for t in proto.graph.initializer if t.external_data]
    if not tensors:
        return None
    tensor = rng.choice(tensors)
    entries = {e.key: e for e in tensor.external_data}
    change = rng.choice(["location", "location", "offset", "length"])
    if change == "location":
        value = _hostile_path(rng, outside).replace("secret", "model.onnx.data")
        if value.startswith("link/"):
            os.symlink(outside, model / "link")
        entries["location"].value = value
    else:
        if change not in entries:
            entry = tensor.external_data.add()
            entry.key = change
            entries[change] = entry
        entries[change].value = str(rng.choice([-1, 0, 2**31, 2**63 - 1, 10**9, 7, 12345678901234567890]))
        value = entries[change].value
    path.write_bytes(proto.SerializeToString())
    return f"'{tensor.name}' {change} = {value!r}"[:120]


_MUTATIONS = {
    "saved_model": ["symlink_out", "hardlink_out", "directory_out", "special_file", "flip_bytes", "truncate",
                    "meta_graph", "meta_graph", "init_op_file_ops", "init_op_file_ops", "signatures", "object_graph",
                    "text_saved_model"],
    "tf_checkpoint": ["symlink_out", "hardlink_out", "special_file", "flip_bytes", "truncate", "state_file_paths",
                      "state_file_paths", "state_file_garbage"],
    "npz_checkpoint": ["symlink_out", "hardlink_out", "special_file", "flip_bytes", "truncate", "state_file_paths",
                       "state_file_garbage", "hostile_npz_member", "hostile_npz_member"],
    "onnx": ["symlink_out", "hardlink_out", "special_file", "flip_bytes", "truncate", "external_location",
             "external_location", "external_location"],
}
_APPLY = {
    "symlink_out": _symlink_out, "hardlink_out": _hardlink_out, "directory_out": _directory_out,
    "special_file": _special_file, "flip_bytes": _flip_bytes, "truncate": _truncate, "meta_graph": _mutate_meta_graph,
    "init_op_file_ops": _init_op_with_file_ops, "signatures": _mutate_signatures, "object_graph": _mutate_object_graph,
    "text_saved_model": _text_saved_model, "state_file_paths": _state_file_paths,
    "state_file_garbage": _state_file_garbage, "hostile_npz_member": _hostile_npz_member,
    "external_location": _external_location,
}


# -- evaluating a job ----------------------------------------------------------------------------------
def _snapshot(directory: str) -> dict[str, tuple[str, bytes | str]]:
    out: dict[str, tuple[str, bytes | str]] = {}
    for root, dirs, files in os.walk(directory, followlinks=False):
        for name in dirs + files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    out[rel] = ("file", f.read())
            else:
                out[rel] = ("other", "")
    return out


def _leaks(values: Any) -> bool:
    """Whether SENTINEL came back in ``values`` (arrays, lists or dicts of them)."""
    if isinstance(values, dict):
        return any(_leaks(v) for v in values.values())
    if isinstance(values, (list, tuple)):
        return any(_leaks(v) for v in values)
    try:
        array = np.asarray(values)
    except Exception:
        return False
    return array.dtype.kind == "f" and bool(np.any(array == SENTINEL))


class ModelEvaluation:
    """Runs the steps of a model job, classifying each as ok, a clean error or a failure."""

    def __init__(self, job: ModelJob, place: str, root: str, backends: list[str], verdict: Verdict):
        self.job, self.place, self.root, self.backends, self.verdict = job, place, root, backends, verdict
        self.outside = os.path.join(place, "outside")
        self.out = os.path.join(place, "out")
        self.cwd = os.path.join(place, "cwd")
        self.where = [place, root, os.path.basename(root)]     # a message naming any path of the job names a place

    def step(self, stage: str, action) -> Any:
        """Run ``action()``; note the outcome, then the escape oracle. The action's value (None on error)."""
        before = _snapshot(self.outside)
        result = None
        try:
            result = action()
        except FuzzTimeout:
            raise
        except SystemExit as exc:
            self.verdict.note(stage, "crash", f"SystemExit {exc.code}")
        except BaseException as exc:   # noqa: B036  (RecursionError, MemoryError are findings too)
            self.verdict.note(stage, *classify_error(exc, self.where))
        else:
            self.verdict.note(stage, "ok")
        self._escape(stage, before, result)
        return result

    def _escape(self, stage: str, before: dict, result: Any) -> None:
        after = _snapshot(self.outside)
        if after != before:
            changed = sorted(set(after) ^ set(before) | {k for k in after if k in before and after[k] != before[k]})
            self.verdict.note(f"{stage}~outside", "escape", f"files outside changed: {changed[:5]}")
        if os.listdir(self.cwd):
            self.verdict.note(f"{stage}~cwd", "escape", f"written to the working directory: {os.listdir(self.cwd)}")
        extra = set(os.listdir(self.place)) - {"model", "outside", "out", "cwd"}
        if extra:
            self.verdict.note(f"{stage}~place", "escape", f"written beside the model: {sorted(extra)}")
        if _leaks(result):
            self.verdict.note(f"{stage}~values", "escape", "a value read from outside the model came back")

    def cli(self, argv: list[str]) -> int:
        from gradreg import cli
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main([str(a) for a in argv])
        except SystemExit as exc:      # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
        lines = [line for line in err.getvalue().splitlines() if line.strip() and "warning:" not in line]
        if code == 1 and (len(lines) != 1 or "Traceback" in err.getvalue() or "internal error" in err.getvalue()):
            raise AssertionError(f"exit 1 with: {err.getvalue()[-400:]}")
        if code not in (0, 1, 2):     # 2: a usage error, of the fuzzer's own arguments
            raise AssertionError(f"exit status {code}: {err.getvalue()[-300:]}")
        if "SENTINEL" in out.getvalue() or str(SENTINEL) in out.getvalue():
            return -1
        return code

    def run(self) -> None:
        getattr(self, f"_{self.job.kind}")()

    def _cli_step(self, stage: str, argv: list[str]) -> None:
        code = self.step(stage, lambda: self.cli(argv))
        if code == -1:
            self.verdict.note(f"{stage}~printed", "escape", "a value read from outside the model was printed")

    # SavedModel: read-only commands change nothing anywhere; the rest keep inside.
    def _saved_model(self) -> None:
        import gradreg as gr
        model_before = _snapshot(self.root)
        self._cli_step("inspect", ["inspect", self.root])
        self._cli_step("inspect-json", ["inspect", self.root, "--json"])
        if _snapshot(self.root) != model_before:
            self.verdict.note("inspect~model", "escape", "a read-only command changed the model's directory")
        model = self.step("load", lambda: gr.load_saved_model(self.root, backend=self.backends[0]))
        if model is None:
            return
        self.step("variables", lambda: {n: model.session.run(v) for n, v in model.variables.items()})
        feeds_path = os.path.join(self.out, "feeds.npz")
        for name, signature in sorted(model.signatures.items()):
            feeds = _synthetic_feeds(signature.inputs)
            self.step(f"signature:{name}", lambda s=signature, f=feeds: s.run(f))
            if name == sorted(model.signatures)[0]:
                np.savez(feeds_path, **feeds)
                self._cli_step("cli-run", ["run", self.root, "--signature", name, "--feed", feeds_path,
                                           "-o", os.path.join(self.out, "r.npz")])
        self.step("save", lambda: model.save(os.path.join(self.out, "copy")))
        self._cli_step("freeze", ["freeze", self.root, "-o", os.path.join(self.out, "frozen.pb")])

    def _tf_checkpoint(self) -> None:
        import gradreg as gr
        from gradreg.formats import tf_checkpoint
        self.step("load_checkpoint", lambda: tf_checkpoint.load_checkpoint(self.root))
        self.step("latest", lambda: tf_checkpoint.latest_checkpoint(self.root))
        metas = sorted(pathlib.Path(self.root).glob("*.meta"))
        if metas:
            def restore() -> Any:
                with gr.Graph().as_default() as graph:
                    saver = gr.train.import_meta_graph(str(metas[-1]))
                    variables = gr.global_variables()
                session = gr.Session(graph)
                saver.restore(session, self.root)
                values = {v.op.name: session.run(v) for v in variables}
                if "save/restore_all" in graph and "save/Const" in graph:
                    session.run("save/restore_all", {"save/Const:0": str(metas[-1])[:-len(".meta")]})
                return values
            self.step("restore", restore)
        self.step("save", lambda: tf_checkpoint.save_checkpoint(os.path.join(self.root, "model.ckpt"),
                                                                {"w": np.float32(1.0)}, 99, max_to_keep=1))

    def _npz_checkpoint(self) -> None:
        import gradreg as gr

        def session_and_saver() -> tuple[Any, Any, Any]:
            graph = gr.Graph()
            with graph.as_default():
                v = gr.Variable(np.zeros((2, 3), np.float32), name="v")
                step = gr.Variable(np.int64(0), name="step")
            session = gr.Session(graph)
            session.run([v.initializer, step.initializer])
            return session, gr.train.Saver([v, step], max_to_keep=1), v

        def restore() -> Any:
            session, saver, v = session_and_saver()
            path = gr.train.latest_checkpoint(self.root)
            if path is None:
                raise CheckpointError(f"{self.root}: no checkpoint found")     # the fuzzer's own words
            saver.restore(session, path)
            return session.run(v)
        self.step("restore", restore)

        def save() -> None:
            session, saver, _ = session_and_saver()
            for step in (5, 6):
                saver.save(session, os.path.join(self.root, "model"), global_step=step)
        self.step("save", save)

    def _onnx(self) -> None:
        import gradreg as gr
        self._cli_step("inspect", ["inspect", self.root])

        def load() -> Any:
            graph = gr.load_graph(self.root)
            return [op.outputs[0] for op in graph.get_operations() if op.type == "Const"], graph
        loaded = self.step("load", load)
        if loaded is not None:
            consts, graph = loaded
            values = self.step("consts", lambda: gr.Session(graph, backend=self.backends[0]).run(consts))
            del values
            inputs = pathlib.Path(DATA / self.job.seed / "inputs.npz")
            if inputs.exists():
                self._cli_step("cli-run", ["run", self.root, "--feed", str(inputs)])
        data = pathlib.Path(self.root).read_bytes() if os.path.isfile(self.root) else b""
        self.where.append("<bytes>")
        self.step("bytes-without-directory", lambda: gr.load_graph(data, format="onnx"))


def _synthetic_feeds(inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    feeds = {}
    for key, tensor in inputs.items():
        dtype = tensor.dtype.base_dtype
        shape = [2 if d is None else min(int(d), 4) for d in (tensor.shape.as_list() if tensor.shape.rank is not None
                                                                else [2])]
        storage = np.dtype(dtype.storage) if dtype.storage is not object else np.dtype(object)
        size = int(np.prod(shape))
        if storage.kind == "f":
            feeds[key] = np.linspace(-1, 1, size or 1)[:size].reshape(shape).astype(storage)
        elif storage.kind in "iub":
            feeds[key] = np.ones(shape, storage)
        else:
            feeds[key] = np.full(shape, b"a", object)
    return feeds


def evaluate_model_job(job: ModelJob, place: str, backends: list[str], verdict: Verdict, seconds: float) -> None:
    """Build the job under ``place`` and run its steps in ``place/cwd``, within ``seconds``."""
    previous = os.getcwd()
    try:
        with time_limit(seconds):
            root = build(job, place)
    except FuzzTimeout as exc:
        verdict.note("build", "timeout", f"the fuzzer's own build: {exc}")
        return
    except Exception as exc:   # a mutation the seed does not allow: the job is the seed as it is
        verdict.note("build", "ok", f"not built: {exc}")
        return
    evaluation = ModelEvaluation(job, place, root, backends, verdict)
    os.chdir(evaluation.cwd)
    try:
        with time_limit(seconds):
            evaluation.run()
    except FuzzTimeout as exc:
        verdict.note(verdict.stages[-1][0] + "+" if verdict.stages else "build", "timeout", str(exc))
    finally:
        os.chdir(previous)
