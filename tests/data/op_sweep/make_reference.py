"""Regenerate the op sweep's TensorFlow reference data (dev only, needs the `tf` extra):

    python tests/data/op_sweep/make_reference.py [--only Sin,Cos] [--family math]

For every case declared in cases_*.py (see sweep.py and README.md): the small graph TensorFlow
builds in graph mode from fixed inputs, its forward values, and TensorFlow's gradients of
``sum(y * cotangent)`` w.r.t. every differentiable input. Each case is first built and run in
a graph of its own; the cases TensorFlow accepts are then rebuilt together, one graph per op
family, each under a name scope named by its case id, and written as

* ``<family>.forward.pb`` — the GraphDef before any gradient (inputs and cotangents are placeholders);
* ``<family>.tf_grad.pb``  — the same graph after ``tf.gradients`` added each case's gradient under
  ``<case id>/gradients/``;
* ``<family>.json``        — the cases (tensor names, op types, notes) and where each array lives;
* ``<family>.npz``         — inputs, cotangents, forward values and gradients, packed one flat
  buffer per dtype (tests/reference_data.py reads them).

``index.json`` lists, per op type, its case ids, and the cases TensorFlow refused (with its error).
"""
from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import pathlib
import sys
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sweep import CASES, PRODUCERS, Case, rng  # noqa: E402

tf1 = tf.compat.v1
tf1.disable_eager_execution()
tf1.disable_control_flow_v2()    # v1 loops and conds (Switch/Merge/Enter/...); functional ones are built explicitly

CASE_MODULES = ["cases_math", "cases_array", "cases_nn", "cases_linalg", "cases_image", "cases_signal",
                "cases_sparse", "cases_control", "cases_misc", "cases_legacy"]


# Differentiable op types of the census (gradreg/registry/tf_gradient_registry.json, outside the excluded
# infrastructure) that no case builds, and why. main() refuses to run if an op type is neither
# covered by a case nor listed here.
NO_CASE = {
    **{op: "a TPU collective: TensorFlow has no CPU (nor XLA CPU) kernel; gradreg runs it as one replica, against "
           "TensorFlow's gradient graph in tests/test_replicas.py" for op in ("AllToAll", "CrossReplicaSum")},
    "QuantizeAndDequantize": "removed at GraphDef version 22: TensorFlow 2.21 refuses to build it",
    "QuantizeAndDequantizeV4Grad": "TensorFlow's rule has the wrong signature (TypeError when differentiated)",
    **{op: "TensorFlow 2.21 builds v1 loops over ref-typed variables with plain Enter/Exit/NextIteration "
           "(it reads the variable first); a hand-built ref loop is not a graph any API writes"
       for op in ("RefEnter", "RefExit", "RefNextIteration")},
}


def check_every_op_has_a_case() -> None:
    census = json.loads((HERE.parent.parent.parent / "gradreg" / "registry" / "tf_gradient_registry.json").read_text())
    wanted = {op for op, e in census["ops"].items() if e["tf"] == "differentiable" and not e["excluded"]}
    have = {op for c in CASES for op in (c.op, *c.covers)}
    lacking = sorted(wanted - have - set(NO_CASE))
    if lacking:
        raise SystemExit(f"differentiable op types with neither a case nor a NO_CASE reason: {lacking}")


def _flatten(out) -> list:
    if isinstance(out, dict):
        return _flatten(out["ys"])
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _flatten(item)]
    return [out] if out is not None else []


def _is_real_or_complex(t) -> bool:
    return t.dtype.is_floating or t.dtype.is_complex


def new_graph(family: str):
    """An empty graph; at the family's GraphDef producer version (PRODUCERS) where it has one."""
    graph = tf.Graph()
    if family in PRODUCERS:
        from tensorflow.core.framework import graph_pb2
        versions = graph_pb2.GraphDef()
        versions.versions.producer = PRODUCERS[family]
        with graph.as_default():
            tf.graph_util.import_graph_def(versions, name="")
    return graph


def _outputs(c: Case, out) -> list:
    return c.ys(out) if c.ys else [t for t in _flatten(out) if _is_real_or_complex(t)]


def build(c: Case, graph) -> dict:
    """Build case ``c``'s forward graph in ``graph`` under the scope ``c.id``; returns the tensors.
    ``ys`` are the case's outputs; ``reference_ys`` those whose values are stored and
    ``grad_ys`` those TensorFlow differentiates: the twin's where the case has one."""
    with graph.as_default(), tf.name_scope(c.id + "/"):
        before = set(tf1.global_variables())
        placeholders = {name: tf1.placeholder(i.dtype, i.static_shape, name=name) for name, i in c.inputs.items()}
        out = c.build(**placeholders)
        ys = _outputs(c, out)
        twin_ys = ys
        if c.twin is not None:
            with tf.name_scope("twin"):
                twin_ys = _outputs(c, c.twin(**placeholders))
        xs = [placeholders[n] for n, i in c.inputs.items() if i.differentiable]
        if isinstance(out, dict):
            xs += list(out.get("xs", []))
        new_vars = [v for v in tf1.global_variables() if v not in before]
        init = tf1.variables_initializer(new_vars, name="init") if new_vars else None
        cots = [tf1.placeholder(y.dtype, y.shape, name=f"cotangent{k}") for k, y in enumerate(ys)]
        random_outputs = []
        if c.random:
            random_outputs = [t for op in graph.get_operations() if op.type == c.op and op.name.startswith(c.id + "/")
                              for t in op.outputs]
    return {"placeholders": placeholders, "ys": ys, "xs": xs, "cots": cots, "init": init,
            "random_outputs": random_outputs, "grad_ys": twin_ys, "reference_ys": ys if c.tf_runs else twin_ys}


def add_gradients(c: Case, graph, t: dict) -> None:
    with graph.as_default(), tf.name_scope(c.id + "/"):
        t["grads"] = tf.gradients(t["grad_ys"], t["xs"], grad_ys=t["cots"], name="gradients")


def _grad_fetches(grads) -> list:
    out = []
    for g in grads:
        if g is None:
            out.append(None)
        elif isinstance(g, tf.IndexedSlices):
            out.append({"values": g.values, "indices": g.indices, "dense_shape": g.dense_shape})
        else:
            out.append(g)
    return out


def _densify(value) -> np.ndarray:
    if isinstance(value, dict):
        dense = np.zeros(value["dense_shape"], value["values"].dtype)
        np.add.at(dense, value["indices"], value["values"])
        return dense
    return value


def feeds_of(c: Case, t: dict, y_shapes=None) -> dict:
    feeds = {t["placeholders"][n]: i.value for n, i in c.inputs.items()}
    if y_shapes is not None:
        for k, (cot, shape) in enumerate(zip(t["cots"], y_shapes)):
            values = rng(c.id, "cotangent", k).normal(size=shape)
            if cot.dtype.is_complex:
                values = values + 1j * rng(c.id, "cotangent-imag", k).normal(size=shape)
            feeds[cot] = values.astype(cot.dtype.as_numpy_dtype)
    return feeds


def run_case(c: Case, sess, t: dict, y_shapes) -> dict:
    """One session run: forward values, gradients and random samples, consistent with each other."""
    feeds = feeds_of(c, t, y_shapes)
    if t["init"] is not None:
        sess.run(t["init"])
    fetches = {"ys": t["reference_ys"], "grads": _grad_fetches(t["grads"]), "random": t["random_outputs"]}
    fetched = sess.run({k: [g for g in v if g is not None] for k, v in fetches.items()}, feeds)
    grads = iter(fetched["grads"])
    fetched["grads"] = [None if g is None else next(grads) for g in fetches["grads"]]
    fetched["feeds"] = {p.name: v for p, v in feeds.items()}
    return fetched


def _first_message_line(text: str) -> str:
    """TensorFlow's run-time errors open with a traceback of where the node was built; the message
    proper follows the ``Node: '...'`` line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for k, line in enumerate(lines[:-1]):
        if line.startswith("Node: "):
            return lines[k + 1]
    return lines[0] if lines else ""


def _named(x):
    """Tensors and operations (in lists, tuples and dicts) as their names."""
    if isinstance(x, dict):
        return {_named(k): _named(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_named(v) for v in x)
    return x.name if isinstance(x, (tf.Tensor, tf.Operation)) else x


def _nodes(x) -> set:
    if isinstance(x, dict):
        return set().union(*(_nodes(v) for v in x.values())) if x else set()
    if isinstance(x, (list, tuple)):
        return set().union(*(_nodes(v) for v in x)) if x else set()
    if isinstance(x, tf.Tensor):
        return {x.op.name}
    return {x.name} if isinstance(x, tf.Operation) else set()


class Runner:
    """A session of ``graph`` cut down to what the cases fetch and feed (``tensors``): a case whose op
    has no CPU kernel (``tf_runs=False``) keeps it in the graph written to disk, but TensorFlow's
    placer refuses a graph holding it, so the session runs the rest. Fetches and feeds go by name."""

    def __init__(self, graph, tensors):
        kept = tf1.graph_util.extract_sub_graph(graph.as_graph_def(), sorted(_nodes(tensors)))
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.graph_util.import_graph_def(kept, name="")
        self.session = tf1.Session(graph=self.graph)

    def run(self, fetches, feed_dict=None):
        return self.session.run(_named(fetches), _named(feed_dict or {}))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.session.close()


def _fetched(t: dict) -> list:
    """What a case's runs fetch and feed."""
    return [t["placeholders"], t["reference_ys"], t["grad_ys"], t["cots"], t["random_outputs"],
            _grad_fetches(t.get("grads") or []), t["init"]]


def validate(c: Case) -> tuple[list, str | None]:
    """Build and run ``c`` in a graph of its own: the output shapes, or TensorFlow's error."""
    graph = new_graph(c.family)
    try:
        t = build(c, graph)
        if not t["ys"]:
            return [], "the case has no float or complex output"
        present = {op.type for op in graph.get_operations()}
        absent = [op for op in (c.op, *c.covers) if op not in present]
        if absent:
            return [], f"the graph has no {', '.join(absent)} node"
        with Runner(graph, _fetched(t)) as sess:
            if t["init"] is not None:
                sess.run(t["init"])
            values = sess.run(t["reference_ys"], feeds_of(c, t))
            if c.twin is not None and c.tf_runs:
                _check_twin(c, values, sess.run(t["grad_ys"], feeds_of(c, t)))
            shapes = [np.shape(v) for v in values]
        add_gradients(c, graph, t)
        if all(g is None for g in t["grads"]):
            return [], "TensorFlow gives no gradient for any input"
        with Runner(graph, _fetched(t)) as sess:
            run_case(c, sess, t, shapes)
        return shapes, None
    except Exception as exc:   # recorded in index.json: TensorFlow refused this case
        return [], f"{type(exc).__name__}: {_first_message_line(str(exc))[:300]}"


def _check_twin(c: Case, values: list, twin_values: list) -> None:
    """A twin must compute the case's function: TensorFlow's values of both agree."""
    for value, twin in zip(values, twin_values):
        if np.shape(value) != np.shape(twin) or not np.allclose(value, twin, rtol=1e-5, atol=1e-6):
            raise ValueError(f"{c.id}: the twin's values differ from the op's")


PRECISE = (tf.float64, tf.complex128)


def finite_difference_check(c: Case, sess, t: dict, got: dict) -> list | None:
    """TensorFlow's gradients against central differences of L = Re(sum(conj(cotangent) * y)), run by
    TensorFlow itself: per x, whether they agree and the largest difference. Flags where TensorFlow's
    rule is wrong or silent (None where L moves). Float64/complex128 cases are checked closely;
    float32/complex64 ones coarsely (step 1e-3, rtol 5e-2, atol 1e-2: catches wrong rules, not
    rounding). Not checked: random ops, variables, cases mixing precisions (a float32 output of a
    float64 input). At kinks and ties (the *_ties, *_zero_* cases, quantizers) disagreeing is expected."""
    xs = [x for x in t["xs"] if x.op.type == "Placeholder"]
    dtypes = {v.dtype for v in xs + list(t["ys"])}
    if c.random or len(xs) != len(t["xs"]) or not (dtypes <= set(PRECISE) or dtypes <= {tf.float32, tf.complex64}):
        return None
    precise = dtypes <= set(PRECISE)
    base = dict(zip(t["placeholders"].values(), (got["feeds"][p.name] for p in t["placeholders"].values())))
    base.update({cot: got["feeds"][cot.name] for cot in t["cots"]})
    if t["init"] is not None:
        sess.run(t["init"])

    def loss(feeds):
        values = sess.run(t["reference_ys"], feeds)
        return sum(float(np.real(np.sum(np.conj(base[cot]).astype(np.complex128) * y))) for cot,
                   y in zip(t["cots"], values))
    out = []
    for x, theirs in zip(xs, got["grads"]):
        value = np.array(base[x])     # a 0-d array where the feed is a scalar: indexable by ()
        numeric = np.zeros(value.shape, np.complex128 if x.dtype.is_complex else np.float64)
        for index in np.ndindex(value.shape):
            step = (1e-6 if precise else 1e-3) * max(1.0, abs(value[index]))
            for unit in ((1.0, 1j) if x.dtype.is_complex else (1.0,)):
                plus, minus = value.copy(), value.copy()
                plus[index] += step * unit
                minus[index] -= step * unit
                numeric[index] += unit * (loss({**base, x: plus}) - loss({**base, x: minus})) / (2 * step)
        dense = np.zeros_like(numeric) if theirs is None else _densify(theirs).astype(numeric.dtype)
        if not np.all(np.isfinite(numeric)):
            out.append({"agrees": None, "max_error": None, "tf_none": theirs is None, "why": "L is not finite nearby"})
            continue
        tolerance = dict(rtol=1e-4, atol=1e-6) if precise else dict(rtol=5e-2, atol=1e-2)
        out.append({"agrees": bool(np.allclose(dense, numeric, **tolerance)),
                    "max_error": float(np.max(np.abs(dense - numeric), initial=0.0)), "tf_none": theirs is None})
    return out


# -- writing ----------------------------------------------------------------------------------------

class Packer:
    """Arrays packed one flat buffer per dtype; ``put`` returns the key recorded in the json."""

    def __init__(self):
        self.buffers: dict[str, list] = {}
        self.sizes: dict[str, int] = {}
        self.arrays: dict[str, list] = {}

    def put(self, key: str, value) -> str:
        value = np.asarray(value)
        dtype = value.dtype.name
        self.arrays[key] = [dtype, self.sizes.get(dtype, 0), list(value.shape)]
        self.buffers.setdefault(dtype, []).append(value.reshape(-1))
        self.sizes[dtype] = self.sizes.get(dtype, 0) + value.size
        return key

    def save(self, path: pathlib.Path) -> None:
        """An .npz NumPy reads, written with fixed zip timestamps so regenerating changes no bytes."""
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for dtype, parts in sorted(self.buffers.items()):
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, np.concatenate(parts), allow_pickle=False)
                info = zipfile.ZipInfo(f"{dtype}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                archive.writestr(info, buffer.getvalue(), compress_type=zipfile.ZIP_DEFLATED)


def _subgraph_ops(graph_def, prefix: str) -> list[str]:
    found = {n.op for n in graph_def.node if n.name.startswith(prefix)}
    functions = {f.signature.name: f for f in graph_def.library.function}
    pending = [n for n in graph_def.node if n.name.startswith(prefix)]
    seen = set()
    while pending:     # ops inside the functions the case calls (If/While bodies)
        node = pending.pop()
        for attr in node.attr.values():
            names = [attr.func.name] if attr.HasField("func") else [f.name for f in attr.list.func]
            for name in names:
                if name in functions and name not in seen:
                    seen.add(name)
                    found.update(n.op for n in functions[name].node_def)
                    pending.extend(functions[name].node_def)
    return sorted(found - set(functions))


def _tensor_name(t) -> str | dict | None:
    if t is None:
        return None
    if isinstance(t, dict):
        return {k: v.name for k, v in t.items()}
    return t.name


def _one_line_each(version: str, records: list, arrays: dict) -> str:
    """The family json with one line per case and per array: diffs stay readable, the file small."""
    cases = ",\n".join(json.dumps(r, separators=(",", ":")) for r in records)
    packed = ",\n".join(f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}" for k, v in arrays.items())
    return f'{{"tensorflow":{json.dumps(version)},\n"cases":[\n{cases}],\n"arrays":{{\n{packed}}}}}\n'


def write_family(name: str, cases: list[Case], shapes: dict) -> list[dict]:
    graph = new_graph(name)
    tensors = {c.id: build(c, graph) for c in cases}
    forward = graph.as_graph_def()
    for c in cases:
        add_gradients(c, graph, tensors[c.id])
    tf_grad = graph.as_graph_def()
    stray = [n.name for n in tf_grad.node if not any(n.name.startswith(c.id + "/") for c in cases)]
    if stray:
        raise RuntimeError(f"{name}: nodes outside every case scope: {stray[:5]}")
    packer, records = Packer(), []
    with Runner(graph, [_fetched(tensors[c.id]) for c in cases]) as sess:
        for c in cases:
            t = tensors[c.id]
            got = run_case(c, sess, t, shapes[c.id])
            grads = _grad_fetches(t["grads"])
            record = {
                "id": c.id, "op": c.op, "covers": [c.op, *c.covers], "variant": c.variant, "note": c.note,
                "random": c.random, "twin": c.twin is not None, "tf_runs": c.tf_runs,
                "inputs": [{"name": p.name, "diff": c.inputs[n].differentiable,
                            "array": packer.put(f"{c.id}|{p.name}", got["feeds"][p.name])}
                           for n, p in t["placeholders"].items()],
                "xs": [x.name for x in t["xs"]],
                "ys": [{"name": y.name, "array": packer.put(f"{c.id}|y{k}", v)}
                       for k, (y, v) in enumerate(zip(t["ys"], got["ys"]))],
                "cotangents": [{"name": cot.name, "array": packer.put(f"{c.id}|{cot.name}", got["feeds"][cot.name])}
                               for cot in t["cots"]],
                "tf_grads": [None if g is None else
                             {"tensor": _tensor_name(g), "array": packer.put(f"{c.id}|dx{k}", _densify(v))}
                             for k, (g, v) in enumerate(zip(grads, got["grads"]))],
                "random_outputs": [{"name": r.name, "array": packer.put(f"{c.id}|{r.name}", v)}
                                   for r, v in zip(t["random_outputs"], got["random"])],
                "init": t["init"].name if t["init"] is not None else None,
                "forward_ops": _subgraph_ops(forward, c.id + "/"),
                "gradient_ops": _subgraph_ops(tf_grad, c.id + "/"),
            }
            record["finite_differences"] = finite_difference_check(c, sess, t, got)
            records.append(record)
    (HERE / f"{name}.forward.pb").write_bytes(forward.SerializeToString(deterministic=True))
    (HERE / f"{name}.tf_grad.pb").write_bytes(tf_grad.SerializeToString(deterministic=True))
    packer.save(HERE / f"{name}.npz")
    (HERE / f"{name}.json").write_text(_one_line_each(tf.__version__, records, packer.arrays))
    return records


def write_opdefs() -> None:
    """tf_opdefs.pb: TensorFlow's OpDef of every op type in the census (tools/) or in a sweep graph,
    so the tests compare gradreg's definitions with TensorFlow's without TensorFlow."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.framework import op_def_registry
    census = json.loads((HERE.parent.parent.parent / "gradreg" / "registry" / "tf_gradient_registry.json").read_text())
    names = set(census["ops"])
    for path in HERE.glob("*.json"):
        if path.name != "index.json":
            for record in json.loads(path.read_text())["cases"]:
                names.update(record["forward_ops"], record["gradient_ops"])
    op_list = op_def_pb2.OpList()
    op_list.op.extend(op_def_registry.get(n) for n in sorted(names) if op_def_registry.get(n) is not None)
    (HERE / "tf_opdefs.pb").write_bytes(op_list.SerializeToString(deterministic=True))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated op types: validate these cases only, write nothing")
    parser.add_argument("--family", help="regenerate this family only (index.json is merged)")
    args = parser.parse_args(argv)
    for module in CASE_MODULES:
        importlib.import_module(module)
    check_every_op_has_a_case()
    cases = CASES
    if args.only:
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c.op in wanted]
    if args.family:
        cases = [c for c in cases if c.family == args.family]
    shapes, refused = {}, {}
    for c in cases:
        shape, error = validate(c)
        if error:
            refused[c.id] = error
            print(f"REFUSED {c.id}: {error}", file=sys.stderr)
        else:
            shapes[c.id] = shape
    if args.only:
        print(f"{len(shapes)} cases ok, {len(refused)} refused")
        return 0
    index_path = HERE / "index.json"
    index = json.loads(index_path.read_text()) if args.family and index_path.exists() else {"ops": {}, "refused": {}}
    families = sorted({c.family for c in cases})
    regenerated = {c.id for c in cases}
    index["finite_differences_disagree"] = {
        k: v for k, v in index.get("finite_differences_disagree", {}).items() if k not in regenerated}
    for name in families:
        members = [c for c in cases if c.family == name and c.id in shapes]
        records = write_family(name, members, shapes)
        index["ops"] = {op: kept for op, ids in index["ops"].items()
                        if (kept := [i for i in ids if i.split("|")[0] != name])}
        for r in records:
            if r["finite_differences"] and any(f["agrees"] is False for f in r["finite_differences"]):
                index.setdefault("finite_differences_disagree", {})[r["id"]] = [
                    {"x": x, **f} for x, f in zip(r["xs"], r["finite_differences"]) if f["agrees"] is False]
            for op in r["covers"]:
                index["ops"].setdefault(op, []).append(f"{name}|{r['id']}")
        print(f"{name}: {len(records)} cases", file=sys.stderr)
    index["refused"] = {k: v for k, v in index["refused"].items()
                        if not any(c.id == k for c in cases)} | refused
    index["ops"] = dict(sorted(index["ops"].items()))
    write_opdefs()
    index["tensorflow"] = tf.__version__
    index["no_case"] = NO_CASE
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    print(f"{sum(len(v) for v in index['ops'].values())} cases over {len(index['ops'])} op types; "
          f"{len(refused)} refused by TensorFlow", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
