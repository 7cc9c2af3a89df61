"""The plugin checker: every op type a package's plugins provide something for (an op definition,
kernels, a shape function, a gradient rule, a NotDifferentiable claim), tried on generated cases
in each declared dtype::

    report = gradreg.testing.check_plugin("gradreg-swish")     # a distribution, module or plugin name
    assert report.ok, "\\n".join(map(str, report.failures))

Per case and dtype: the op builds (its shape function runs) and its kernel's outputs have the
dtypes and shapes the graph says, on inputs of known and of unknown rank; the numba kernel, where
the plugin gives one, agrees with NumPy's; a dtype narrower than float64 agrees with float64.
In the finite-difference dtype (float64 where the op allows it): the rule against central
differences (first order, each output alone and all at once, on known and unknown shapes) and
its own gradient (second order); a NotDifferentiable claim; the gradient graph through a
GraphDef and an ONNX round trip. With TensorFlow or onnxruntime installed, their values for what
they know (gradreg.testing.references). Cases come from the plugin (``family.case``,
gradreg.registry.cases) or, where the definition allows, a default one.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from gradreg.errors import GradregError, PluginError
from gradreg.model import dtypes
from gradreg.model.dtypes import DType
from gradreg.registry import Registry, get_registry
from gradreg.registry.cases import Case
from gradreg.runtime.session import Session
from gradreg.testing import gradient_checks as grads
from gradreg.testing import references as refs
from gradreg.testing.report import OpReport, PluginReport, element, largest_error, tolerance
from gradreg.testing.trials import CaseError, Trial, build_trial, case_dtypes, default_case, finite_difference_dtype

# What a plugin provides for an op type, as OpReport.provides names it.
NOT_DIFFERENTIABLE = "not differentiable"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def plugins_of(package: str, registry: Registry | None = None) -> list[str]:
    """The plugins ``package`` names: a distribution (``gradreg-swish``), a top-level module
    (``gradreg_swish``) or a plugin (``swish``). PluginError listing the installed ones if none."""
    registry = registry or get_registry()
    wanted = _normalize(package)
    found = [name for name, record in registry.plugins.items()
             if wanted in (_normalize(name), _normalize(record.distribution),
                           _normalize(record.target.split(":")[0].split(".")[0]))]
    if not found:
        installed = sorted({r.distribution or name for name, r in registry.plugins.items()})
        raise PluginError(f"no installed gradreg plugin comes from '{package}' (a distribution, module or plugin "
                          f"name); installed: {', '.join(installed)}")
    return sorted(found)


def op_types_of(plugin: str, registry: Registry | None = None) -> dict[str, tuple[str, ...]]:
    """op type -> what ``plugin`` provides for it (op, shape, kernel:<backend>, gradient, not
    differentiable, cases), for every op type it provides something for."""
    registry = registry or get_registry()
    registry.complete_all()
    record = registry.plugins[plugin]
    found: dict[str, set[str]] = {}
    for kind, keys in record.provides.items():
        if kind in ("op", "shape", "gradient"):
            for key in keys:
                found.setdefault(key, set()).add(kind)
    for backend in registry.backend_names():   # the plugin's own kernels: other families' stay unimported
        for key in registry.plugin_entries(plugin, "gradreg_kernels", backend=backend) or {}:
            found.setdefault(key, set()).add(f"kernel:{backend}")
    for key, rule in (registry.plugin_entries(plugin, "gradreg_gradients") or {}).items():
        if rule is None:
            found.setdefault(key, set()).discard("gradient")
            found[key].add(NOT_DIFFERENTIABLE)
    for key in registry.plugin_entries(plugin, "gradreg_cases") or {}:
        found.setdefault(key, set()).add("cases")
    order = ("op", "shape", "kernel:numpy", "gradient", NOT_DIFFERENTIABLE, "cases")
    return {key: tuple(sorted(kinds, key=lambda k: (order.index(k) if k in order else len(order), k)))
            for key, kinds in sorted(found.items())}


def targets(package: str) -> list[tuple[str, str]]:
    """(plugin, op type) for every op type ``package``'s plugins provide something for."""
    return [(plugin, op_type) for plugin in plugins_of(package) for op_type in op_types_of(plugin)]


def check_plugin(package: str, references: Iterable[str] = refs.REFERENCES) -> PluginReport:
    """Check every op type ``package`` provides something for (see the module docstring)."""
    report = PluginReport(package, plugins_of(package))
    for plugin, op_type in targets(package):
        report.ops.append(check_op(plugin, op_type, references))
    return report


def check_op(plugin: str, op_type: str, references: Iterable[str] = refs.REFERENCES) -> OpReport:
    """Check what ``plugin`` provides for ``op_type`` on its cases (see the module docstring);
    ``references`` are the runtimes compared with when installed (tensorflow, onnxruntime)."""
    registry = get_registry()
    provides = op_types_of(plugin, registry).get(op_type, ())
    report = OpReport(plugin, op_type, provides)
    definition = registry.op_definition(op_type)
    if definition is None:
        report.skip(None, "everything", f"'{op_type}' is no installed op type (a gradient name for "
                    f"gradient_override_map?): it is checked through the op types it is applied to")
        return report
    declared = list((registry.plugin_entries(plugin, "gradreg_cases") or {}).get(op_type, ()))
    cases = declared or [c for c in [default_case(definition)] if c is not None]
    if not cases:
        report.fail(None, "cases", f"no check case: the inputs or attrs of {op_type} need values the checker cannot "
                    f"guess; declare one next to the op, e.g. family.case({op_type!r}, [2, 3], ...)")
        return report
    state = _gradient_state(report, registry, plugin, op_type)
    chosen = set(references)
    for case in cases:
        _check_case(report, case, state, chosen)
    return report


def _gradient_state(report: OpReport, registry: Registry, plugin: str, op_type: str) -> str:
    """"rule", "claim" (NotDifferentiable) or "none": what of the plugin's is checked."""
    own = registry.plugin_entries(plugin, "gradreg_gradients") or {}
    if op_type not in own:
        return "none"
    try:
        in_use = registry.gradients.provider(op_type)
        registry.gradients.lookup(op_type)
    except PluginError as exc:
        report.fail(None, "gradient", f"the rule is not in use: {exc}")
        return "none"
    if in_use != plugin:
        report.skip(None, "gradient", f"the rule in use comes from '{in_use}', which overrides this plugin's")
        return "none"
    return "claim" if own[op_type] is None else "rule"


def _check_case(report: OpReport, case: Case, state: str, references: set[str]) -> None:
    definition = get_registry().op_definition(case.op_type)
    assert definition is not None
    tried = case_dtypes(case, definition)
    if not tried:
        report.fail(None, "cases", f"the case ({case.describe()}) tries no dtype the checker can feed",
                    case=case.describe())
        return
    fd_dtype = finite_difference_dtype(tried)
    for dtype in tried:
        try:
            trial = build_trial(case, dtype)
        except CaseError as exc:
            report.fail(dtype, "build", str(exc), case=case.describe())
            continue
        outputs = _check_forward(report, trial, references)
        if outputs is None:
            continue
        if dtype is not None and dtype is not fd_dtype:
            _check_precision(report, trial, outputs, state)
            continue
        if dtype is fd_dtype and _owns_forward(report):
            refs.check_onnx(report, trial, trial.outputs, trial.feeds(), outputs, "outputs",
                            "onnxruntime" in references)
        if dtype is fd_dtype and state == "claim":
            grads.check_claim(report, trial, Session(trial.graph, backend="numpy", check_outputs=False))
        elif dtype is fd_dtype and state == "rule":
            _check_gradient(report, trial, outputs, references)


# -- the forward pass ----------------------------------------------------------------------------------

def _owns_forward(report: OpReport) -> bool:
    """Whether the plugin provides the op's definition, shape function or a kernel (then the
    forward checks are its own; a plugin of gradient rules only is not judged on them)."""
    return any(k in ("op", "shape") or k.startswith("kernel:") for k in report.provides)


def _check_forward(report: OpReport, trial: Trial, references: set[str]) -> list[np.ndarray] | None:
    """The kernel's outputs: dtypes and shapes as the graph says, on known and unknown shapes; the
    numba kernel's; TensorFlow's. None if the kernel fails."""
    case, dtype = trial.case.describe(), trial.dtype
    try:
        outputs = [np.asarray(v) for v in Session(trial.graph, backend="numpy", check_outputs=False).run(
            trial.outputs, trial.feeds())]
    except GradregError as exc:
        if _owns_forward(report):
            report.fail(dtype, "kernel", f"the NumPy kernel fails: {exc}", case=case)
        else:   # another plugin's kernel: nothing of this plugin's can be checked in this dtype
            report.skip(dtype, "everything", f"the op's NumPy kernel (not this plugin's) fails: {exc}")
        return None
    if not _owns_forward(report):
        return outputs
    if not _check_outputs(report, trial, outputs, "shape function"):
        return None
    _check_unknown_rank(report, trial, outputs)
    if "kernel:numba" in report.provides:
        _check_backend(report, trial, outputs, "numba")
    if "tensorflow" in references and refs.reference("tensorflow") is not None and not refs.tf_knows([trial.op.type]) \
            and any(k.startswith("kernel:") for k in report.provides):
        refs.check_tf_forward(report, trial, outputs)
    return outputs


def _check_outputs(report: OpReport, trial: Trial, outputs: Sequence[np.ndarray], check: str) -> bool:
    for k, (t, value) in enumerate(zip(trial.outputs, outputs)):
        declared = t.dtype
        if declared is not None and declared.base_dtype.storage.kind != "O" \
                and value.dtype != declared.base_dtype.storage:
            report.fail(trial.dtype, "kernel", f"output {k} is {value.dtype}; the graph says {declared.name} (stored "
                        f"as {declared.base_dtype.storage})", case=trial.case.describe())
            return False
        if not t.shape.is_compatible_with(list(value.shape)):
            report.fail(trial.dtype, check, f"the shape function gives output {k} the shape {t.shape}; the kernel "
                        f"returns {tuple(value.shape)}", case=trial.case.describe())
            return False
    report.passes(trial.dtype, "kernel and " + check)
    return True


def _check_unknown_rank(report: OpReport, trial: Trial, outputs: Sequence[np.ndarray]) -> None:
    """The op built on Placeholders of unknown rank: its shape function copes, and the kernel gives
    the same values."""
    try:
        blind = build_trial(trial.case, trial.dtype, known_shapes=False, values=[trial.values[i] for i in trial.varied])
        got = Session(blind.graph, backend="numpy", check_outputs=False).run(blind.outputs, blind.feeds())
    except GradregError as exc:
        report.fail(trial.dtype, "shape function with unknown shapes", f"inputs of unknown rank: {exc}",
                    case=trial.case.describe())
        return
    if _check_outputs(report, blind, [np.asarray(v) for v in got], "shape function with unknown shapes"):
        _same_values(report, trial, "unknown shapes", "the value on inputs of unknown shape", got, outputs, 0.0)


def _same_values(report: OpReport, trial: Trial, check: str, what: str, got: Sequence[object],
                 expected: Sequence[np.ndarray], allowed: float) -> bool:
    for k, (value, want) in enumerate(zip(got, expected)):
        error, relative, index = largest_error(np.asarray(value), want)
        if relative > allowed:
            report.fail(trial.dtype, check, f"{what} of output {k} differs: largest error {error:.3g} at element "
                        f"{element(want.shape, index)}", error, trial.case.describe())
            return False
    return True


def _check_backend(report: OpReport, trial: Trial, outputs: Sequence[np.ndarray], backend: str) -> None:
    try:
        got = Session(trial.graph, backend=backend, check_outputs=False).run(trial.outputs, trial.feeds())
    except GradregError as exc:
        report.fail(trial.dtype, f"{backend} kernel", f"the {backend} backend fails: {exc}", case=trial.case.describe())
        return
    if _same_values(report, trial, f"{backend} kernel", f"the {backend} backend's value", got, outputs,
                    max(tolerance(trial.dtype), 1e-12)):
        report.passes(trial.dtype, f"{backend} kernel")


# -- other dtypes against the finite-difference one ---------------------------------------------------

def _wider(dtype: DType) -> DType | None:
    if dtype.is_complex:
        return dtypes.complex128 if dtype is not dtypes.complex128 else None
    return dtypes.float64 if dtype.is_floating and dtype is not dtypes.float64 else None


def _check_precision(report: OpReport, trial: Trial, outputs: Sequence[np.ndarray], state: str) -> None:
    """A float dtype narrower than float64: the op's outputs (and the rule's gradient) within the
    dtype's tolerance of float64's on the same (rounded) values."""
    wide = _wider(trial.dtype) if trial.dtype is not None else None
    if wide is None:
        return
    widened = [trial.values[i].astype(wide.storage) for i in trial.varied]
    try:
        reference = build_trial(trial.case, wide, values=widened)
        expected = Session(reference.graph, backend="numpy", check_outputs=False).run(reference.outputs,
                                                                                       reference.feeds())
    except GradregError:
        return   # the case does not run in the wider type (the op does not allow it)
    if _owns_forward(report) and _same_values(report, trial, "precision", f"compared with {wide.name}, the value",
                                              outputs, [np.asarray(e) for e in expected], tolerance(trial.dtype)):
        report.passes(trial.dtype, f"values within {tolerance(trial.dtype):g} of {wide.name}")
    if state == "rule" and trial.dtype is not None and trial.dtype.is_floating:
        _check_gradient_precision(report, trial, reference)


def _check_gradient_precision(report: OpReport, trial: Trial, reference: Trial) -> None:
    session = Session(trial.graph, backend="numpy", check_outputs=False)
    try:
        vjp = grads.build_vjp(trial, session)
    except GradregError as exc:
        report.fail(trial.dtype, "gradient", f"building or running the rule's gradient fails: {exc}",
                    case=trial.case.describe())
        return
    wide_session = Session(reference.graph, backend="numpy", check_outputs=False)
    try:
        wide = grads.build_vjp(reference, wide_session)
        wide.cotangents = [c.astype(reference.op.outputs[k].known_dtype.storage) for k, c in
                           zip(wide.y_indices, vjp.cotangents)]
        expected = grads.run_vjp(wide_session, reference, wide, [reference.values[i] for i in reference.varied])
    except GradregError:
        return   # the wider type's own gradient failing is reported by its own checks
    for a, (value, want) in enumerate(zip(vjp.values, expected)):
        error, relative, index = largest_error(value, want)
        if relative > 4 * tolerance(trial.dtype):
            name = trial.input_names[trial.varied[vjp.x_positions[a]]]
            report.fail(trial.dtype, "gradient precision", f"the gradient of input '{name}' differs from "
                        f"{reference.dtype.name if reference.dtype else ''}'s on the same values: largest error "
                        f"{error:.3g} at element {element(want.shape, index)}", error, trial.case.describe())
            return
    report.passes(trial.dtype, "gradient within tolerance of the wider type's")


# -- the gradient ---------------------------------------------------------------------------------------

def _check_gradient(report: OpReport, trial: Trial, outputs: Sequence[np.ndarray], references: set[str]) -> None:
    session = Session(trial.graph, backend="numpy", check_outputs=False)
    dtype, case = trial.dtype, trial.case.describe()
    if not grads.x_positions(trial) or not trial.float_outputs():
        report.skip(dtype, "gradient", "no float input (given as a shape) or float output to differentiate")
        return
    for k, value in enumerate(outputs):
        if value.dtype.kind in "fc" and not np.all(np.isfinite(value)):
            index = int(np.argmax(~np.isfinite(value).reshape(-1)))
            report.fail(dtype, "gradient", f"not checked: output {k} is {value.flat[index]} at element "
                        f"{element(value.shape, index)} of the case's values; declare a case whose domain is where "
                        f"the op is defined, e.g. family.case({trial.op.type!r}, ..., domain=(0.1, 2.0))", case=case)
            return
    try:
        vjp = grads.build_vjp(trial, session)
    except GradregError as exc:
        report.fail(dtype, "gradient", f"building or running the rule's gradient fails: {exc}", case=case)
        return
    grads.check_first_order(report, trial, session, vjp)
    grads.check_unknown_shapes(report, trial, vjp)
    if trial.case.second_order and trial.case.vjp is None:
        grads.check_second_order(report, trial, session, vjp)
    fetches = [g for g in vjp.grads if g is not None]
    if not fetches:
        report.skip(dtype, "round trips", "the rule gives no input a gradient")
        return
    expected = [v for v, g in zip(vjp.values, vjp.grads) if g is not None]
    feeds = vjp.feeds(trial)
    refs.check_graphdef(report, trial, fetches, feeds, expected)
    refs.check_onnx(report, trial, fetches, feeds, expected, "gradient", "onnxruntime" in references)
    if "tensorflow" not in references or refs.reference("tensorflow") is None:
        return
    if trial.case.vjp is None and not refs.tf_knows([trial.op.type]):
        xs = [trial.inputs[trial.varied[p]] for p in vjp.x_positions]
        refs.check_tf_gradient(report, trial, [trial.op.outputs[k] for k in vjp.y_indices], xs, vjp.cotangents,
                               vjp.values)
    refs.check_tf_runs_gradient(report, trial, fetches, feeds, expected)
