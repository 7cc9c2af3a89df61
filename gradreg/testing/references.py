"""The plugin checker's checks against files and other runtimes:

* the gradient graph written as a GraphDef and read back gives the same values, and keeps the
  ``_gradreg_rule`` provenance of its nodes (gradreg.autodiff.provenance);
* written as ONNX (where every op maps) and read back, and run by onnxruntime when installed;
* with TensorFlow installed: its kernel's values for op types it knows, its own gradient of the op
  (unless the case declares why the rule departs from it), and gradreg's gradient graph run by
  TensorFlow (where it knows every op of it).

TensorFlow and onnxruntime are imported only when a check first needs them, once.
"""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradreg.autodiff.provenance import rule_origins
from gradreg.errors import GradregError
from gradreg.formats import load_graph
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.model.graph import Graph, Tensor
from gradreg.model.traversal import needed_ops
from gradreg.proto import graph_pb2
from gradreg.registry import get_registry
from gradreg.registry.extensions import GraphFormat
from gradreg.runtime.session import Session
from gradreg.testing.report import OpReport, element, largest_error, tolerance
from gradreg.testing.trials import Trial

REFERENCES = ("tensorflow", "onnxruntime")
_modules: dict[str, Any] = {}


def reference(name: str) -> Any:
    """The module ``name`` (tensorflow, onnxruntime) if installed, else None; imported once."""
    if name not in _modules:
        _modules[name] = importlib.import_module(name) if importlib.util.find_spec(name) is not None else None
    return _modules[name]


def subgraph_def(graph: Graph, fetches: Sequence[Tensor]) -> graph_pb2.GraphDef:
    """The nodes ``fetches`` need (names kept), as a GraphDef with the graph's library."""
    keep = {op.name for op in needed_ops([t.op for t in fetches], set())}
    whole = graph.as_graph_def()
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(whole.versions)
    out.library.CopyFrom(whole.library)
    out.node.extend(node for node in whole.node if node.name in keep)
    return out


def _compare(report: OpReport, dtype: DType | None, check: str, what: str, names: Sequence[str],
             got: Sequence[Any], expected: Sequence[np.ndarray], allowed: float, case: str) -> bool:
    for name, actual, want in zip(names, got, expected):
        error, relative, index = largest_error(np.asarray(actual), np.asarray(want))
        if relative > allowed:
            report.fail(dtype, check, f"{what} of {name} differs: largest error {error:.3g} at element "
                        f"{element(np.shape(want), index)}", error, case)
            return False
    return True


# -- GraphDef -----------------------------------------------------------------------------------------

def check_graphdef(report: OpReport, trial: Trial, fetches: Sequence[Tensor], feeds: dict[Tensor, np.ndarray],
                   expected: Sequence[np.ndarray]) -> None:
    """The graph written as a binary GraphDef and read back: the same values, the same provenance."""
    case = trial.case.describe()
    try:
        loaded = load_graph(trial.graph.as_graph_def().SerializeToString(), format="graphdef")
        got = Session(loaded, backend="numpy").run([t.name for t in fetches], {t.name: v for t, v in feeds.items()})
    except GradregError as exc:
        report.fail(trial.dtype, "graphdef round trip", f"the gradient graph written as a GraphDef does not load "
                    f"and run: {exc}", case=case)
        return
    names = [f"gradient '{t.name}'" for t in fetches]
    if not _compare(report, trial.dtype, "graphdef round trip", "read back, the value", names, got, expected,
                    1e-12, case):
        return
    before = rule_origins(needed_ops([t.op for t in fetches], set()))
    after = rule_origins(needed_ops([loaded.get_tensor(t.name).op for t in fetches], set()))
    if before != after:
        report.fail(trial.dtype, "graphdef round trip", f"the nodes' _gradreg_rule provenance changed: "
                    f"{_origins(before)} before, {_origins(after)} after", case=case)
        return
    mine = [str(o) for o in after if o.source == report.plugin]
    report.passes(trial.dtype, "graphdef round trip" + (f" (provenance {', '.join(mine)})" if mine else ""))


def _origins(found: dict[Any, list[str]]) -> str:
    return "; ".join(f"{origin} on {len(nodes)} nodes" for origin, nodes in found.items()) or "none"


# -- ONNX -----------------------------------------------------------------------------------------------

def _onnx_format() -> GraphFormat | None:
    try:
        found = get_registry().formats.lookup("onnx")
    except GradregError:
        return None
    return None if found is None or found.value.write_outputs is None else found.value


def check_onnx(report: OpReport, trial: Trial, fetches: Sequence[Tensor], feeds: dict[Tensor, np.ndarray],
               expected: Sequence[np.ndarray], what: str, use_onnxruntime: bool = True) -> None:
    """``fetches`` written as an ONNX model: read back by gradreg, and run by onnxruntime (when
    installed and ``use_onnxruntime``)."""
    fmt = _onnx_format()
    check = f"onnx ({what})"
    if fmt is None or reference("onnx") is None:
        report.skip(trial.dtype, check, "the onnx package or gradreg's ONNX format is not installed")
        return
    outputs = {f"check_output_{i}": t for i, t in enumerate(fetches)}
    try:
        data = fmt.write_outputs(trial.graph, outputs)  # type: ignore[misc]  # checked not None above
    except (GradregError, NotImplementedError, ValueError) as exc:
        report.skip(trial.dtype, check, f"not written as ONNX: {str(exc).splitlines()[0]}")
        return
    case = trial.case.describe()
    names = [f"{what} '{t.name}'" for t in fetches]
    allowed = max(tolerance(trial.dtype), 1e-7)
    try:
        assert fmt.read is not None
        back = fmt.read(data, "<plugin check>")
        got = Session(back, backend="numpy").run([back.get_tensor(n) for n in outputs],
                                                 {t.op.name: v for t, v in feeds.items() if t.op.name in back})
    except GradregError as exc:
        report.fail(trial.dtype, check, f"the ONNX model gradreg wrote does not read back and run: {exc}", case=case)
        return
    if not _compare(report, trial.dtype, check, "the ONNX model read back by gradreg, the value", names, got,
                    expected, allowed, case):
        return
    ort = reference("onnxruntime") if use_onnxruntime else None
    if ort is None:
        if use_onnxruntime:
            report.skip(trial.dtype, check + " in onnxruntime", "onnxruntime is not installed")
        report.passes(trial.dtype, check + " round trip")
        return
    try:
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        got = session.run(list(outputs), {t.op.name: v for t, v in feeds.items() if t.op.name in wanted})
    except Exception as exc:   # onnxruntime's own errors: any is a failure to report
        report.fail(trial.dtype, check, f"onnxruntime cannot run the ONNX model gradreg wrote: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", case=case)
        return
    if _compare(report, trial.dtype, check, "onnxruntime's value", names, got, expected, allowed, case):
        report.passes(trial.dtype, check + " round trip and onnxruntime")


# -- TensorFlow ----------------------------------------------------------------------------------------

def _tf_dtype_ok(dtype: DType | None) -> bool:
    return dtype is not dtypes.bfloat16


def tf_knows(op_types: Sequence[str]) -> list[str]:
    """The op types of ``op_types`` TensorFlow does not know (all of them without TensorFlow)."""
    tf = reference("tensorflow")
    return list(op_types) if tf is None else [t for t in op_types if not hasattr(tf.raw_ops, t)]


def _tf_run(graph_def: graph_pb2.GraphDef, fetches: Sequence[str], feeds: dict[str, np.ndarray],
            gradient_of: tuple[list[str], list[str], list[np.ndarray]] | None = None) -> list[Any]:
    """Run ``graph_def`` in TensorFlow; ``gradient_of`` (ys, xs, cotangents) fetches TensorFlow's
    gradients of the ys w.r.t. the xs instead (None where TensorFlow gives none)."""
    tf = reference("tensorflow")
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(graph_def.SerializeToString()), name="")
        feed = {graph.get_tensor_by_name(name): value for name, value in feeds.items()}
        if gradient_of is None:
            targets = [graph.get_tensor_by_name(name) for name in fetches]
        else:
            ys, xs, cotangents = gradient_of
            y_tensors = [graph.get_tensor_by_name(n) for n in ys]
            dys = [tf.compat.v1.placeholder(y.dtype, c.shape) for y, c in zip(y_tensors, cotangents)]
            feed.update(zip(dys, cotangents))
            grads = tf.compat.v1.gradients(y_tensors, [graph.get_tensor_by_name(n) for n in xs], grad_ys=dys)
            targets = [g for g in grads if g is not None]
        with tf.compat.v1.Session(graph=graph) as session:
            values = iter(session.run(targets, feed))
    if gradient_of is None:
        return list(values)
    return [None if g is None else next(values) for g in grads]


def check_tf_forward(report: OpReport, trial: Trial, expected: Sequence[np.ndarray]) -> None:
    """TensorFlow's kernel of the op gives the same outputs."""
    if not _tf_dtype_ok(trial.dtype) or not expected:
        return
    case = trial.case.describe()
    fetches = trial.outputs[:len(expected)]
    try:
        got = _tf_run(subgraph_def(trial.graph, fetches), [t.name for t in fetches],
                      {t.name: v for t, v in trial.feeds().items()})
    except Exception as exc:   # TensorFlow's errors (its kernel refuses the dtype, the attrs): reported
        report.skip(trial.dtype, "tensorflow's kernel", f"TensorFlow cannot run the op: {_first_line(exc)}")
        return
    if _compare(report, trial.dtype, "tensorflow's kernel", "TensorFlow's value", [f"output {k}" for k in
                range(len(fetches))], got, expected, max(tolerance(trial.dtype), 1e-7), case):
        report.passes(trial.dtype, "tensorflow's kernel")


def check_tf_gradient(report: OpReport, trial: Trial, ys: Sequence[Tensor], xs: Sequence[Tensor],
                      cotangents: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> None:
    """TensorFlow's own gradient of the op, at the same cotangents, gives gradreg's."""
    case = trial.case.describe()
    if trial.case.departs_from_tensorflow:
        report.skip(trial.dtype, "tensorflow's gradient", f"the case departs from it: "
                    f"{trial.case.departs_from_tensorflow}")
        return
    try:
        got = _tf_run(subgraph_def(trial.graph, ys), [], {t.name: v for t, v in trial.feeds().items()},
                      ([y.name for y in ys], [x.name for x in xs], list(cotangents)))
    except LookupError as exc:
        report.skip(trial.dtype, "tensorflow's gradient", f"TensorFlow has none: {_first_line(exc)}")
        return
    except Exception as exc:   # TensorFlow's errors: the comparison cannot be made
        report.skip(trial.dtype, "tensorflow's gradient", f"TensorFlow cannot compute it: {_first_line(exc)}")
        return
    for x, value, want in zip(xs, got, expected):
        if value is None:
            if np.any(want):
                report.fail(trial.dtype, "tensorflow's gradient", f"TensorFlow gives input '{x.op.name}' no "
                            f"gradient; the rule gives one (declare departs_from_tensorflow in the case if that "
                            f"is deliberate)", case=case)
                return
            continue
        error, relative, index = largest_error(np.asarray(value), want)
        if relative > max(tolerance(trial.dtype), 1e-7):
            report.fail(trial.dtype, "tensorflow's gradient", f"TensorFlow's gradient of input '{x.op.name}' differs "
                        f"from the rule's: largest error {error:.3g} (TensorFlow {np.asarray(value).flat[index]:.6g}, "
                        f"rule {np.asarray(want).flat[index]:.6g}) at element {element(np.shape(want), index)} "
                        f"(declare departs_from_tensorflow in the case if that is deliberate)", error, case)
            return
    report.passes(trial.dtype, "tensorflow's gradient")


def check_tf_runs_gradient(report: OpReport, trial: Trial, fetches: Sequence[Tensor],
                           feeds: dict[Tensor, np.ndarray], expected: Sequence[np.ndarray]) -> None:
    """TensorFlow imports gradreg's gradient graph (its provenance attrs included) and computes
    gradreg's values."""
    graph_def = subgraph_def(trial.graph, fetches)
    unknown = sorted(set(tf_knows(sorted({n.op for n in graph_def.node}))))
    if unknown:
        report.skip(trial.dtype, "tensorflow runs the gradient graph", f"TensorFlow does not know "
                    f"{', '.join(unknown)}")
        return
    present = {node.name for node in graph_def.node}
    try:
        got = _tf_run(graph_def, [t.name for t in fetches], {t.name: v for t, v in feeds.items()
                                                             if t.op.name in present})
    except Exception as exc:   # TensorFlow refusing gradreg's graph is what this check reports
        report.fail(trial.dtype, "tensorflow runs the gradient graph", f"TensorFlow cannot import and run "
                    f"gradreg's gradient graph: {_first_line(exc)}", case=trial.case.describe())
        return
    if _compare(report, trial.dtype, "tensorflow runs the gradient graph", "TensorFlow's value",
                [f"gradient '{t.name}'" for t in fetches], got, expected, max(tolerance(trial.dtype), 1e-7),
                trial.case.describe()):
        report.passes(trial.dtype, "tensorflow runs the gradient graph")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
