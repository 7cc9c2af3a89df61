"""The gradient checks of the plugin checker, on one trial (a case at the finite-difference dtype):

* the rule's Jacobian of each float output, alone (the other outputs' gradients None), against
  central differences, or against the case's ``vjp`` for a rule that is not the derivative on
  purpose; all outputs at once with random cotangents (the multi-output path);
* the same gradient built on inputs of unknown shape (a rule may not need static shapes);
* the gradient of the gradient against differences of the gradient, where the rule's ops
  have rules themselves;
* a NotDifferentiable claim: differences of each float output are zero (or a jump, not a slope).

Errors are the largest absolute difference, relative to max(1, the largest derivative).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradreg.autodiff.gradients import gradients
from gradreg.build.builders import apply_op, as_dense
from gradreg.errors import GradregError, NoGradientError
from gradreg.model.graph import Tensor
from gradreg.runtime.session import Session
from gradreg.testing.report import OpReport, element, largest_error
from gradreg.testing.trials import Trial, build_trial, round_to

# Central-difference steps: the first that meets the tolerance counts (a kink of the op within
# a step of a point, or rounding at too small a step, spoils one of them, rarely both).
STEPS = {"float64": (1e-3, 1e-5), "float32": (1e-2, 1e-3)}
FLOAT32_TOLERANCE = 1e-2   # finite differences in float32 are worth no better


@dataclass
class Vjp:
    """The combined gradient of a trial: all float outputs, random cotangents, every float input."""
    x_positions: list[int]          # positions in trial.varied of the inputs differentiated
    y_indices: list[int]            # the float outputs
    cotangents: list[np.ndarray]    # one per y
    placeholders: list[Tensor]      # the cotangents' placeholders
    grads: list[Tensor | None]      # one per x (None: the rule gives that input no gradient)
    values: list[np.ndarray]        # the grads' values (zeros for None)

    def feeds(self, trial: Trial) -> dict[Tensor, np.ndarray]:
        return {**trial.feeds(), **dict(zip(self.placeholders, self.cotangents))}


def forward(session: Session, trial: Trial, outputs: Sequence[int]) -> Callable[..., list[np.ndarray]]:
    """``f(*varied values)`` -> the values of ``outputs``."""
    run = session.make_callable([trial.op.outputs[k] for k in outputs], [trial.inputs[i] for i in trial.varied])
    # Copies: an output may be a view of a fed array (Identity, Reshape), which changes next.
    return lambda *values: [np.array(v, copy=True) for v in run(*values)]


def x_positions(trial: Trial) -> list[int]:
    return [p for p, i in enumerate(trial.varied) if trial.inputs[i].known_dtype.is_floating]


def build_vjp(trial: Trial, session: Session, seed: int = 1) -> Vjp:
    """gradients() of every float output with random cotangents; its values. GradregError from the rule."""
    xs = x_positions(trial)
    ys = trial.float_outputs()
    base = forward(session, trial, ys)(*[trial.values[i] for i in trial.varied])
    rng = np.random.default_rng(seed)
    cotangents = [round_to(rng.uniform(-1, 1, size=v.shape), trial.op.outputs[k].known_dtype)
                  for k, v in zip(ys, base)]
    with trial.graph.as_default():
        placeholders = [apply_op("Placeholder", dtype=trial.op.outputs[k].known_dtype, shape=list(c.shape),
                                 name=f"check/cotangent{k}") for k, c in zip(ys, cotangents)]
        grads = gradients([trial.op.outputs[k] for k in ys], [trial.inputs[trial.varied[p]] for p in xs],
                          grad_ys=placeholders, name="check/gradients")
    dense = [None if g is None else as_dense(g) for g in grads]
    vjp = Vjp(xs, ys, cotangents, placeholders, dense, [])
    vjp.values = run_vjp(session, trial, vjp, [trial.values[i] for i in trial.varied])
    return vjp


def run_vjp(session: Session, trial: Trial, vjp: Vjp, varied_values: Sequence[np.ndarray]) -> list[np.ndarray]:
    present = [g for g in vjp.grads if g is not None]
    run = session.make_callable(present, [*(trial.inputs[i] for i in trial.varied), *vjp.placeholders])
    got = iter(run(*varied_values, *vjp.cotangents) if present else [])
    return [np.zeros(trial.values[trial.varied[p]].shape) if g is None else np.asarray(next(got))
            for p, g in zip(vjp.x_positions, vjp.grads)]


def numerical(run: Callable[..., list[np.ndarray]], values: Sequence[np.ndarray], position: int,
              delta: float) -> list[np.ndarray]:
    """Central differences of every output ``run`` gives w.r.t. varied input ``position``: one
    (x size, y size) Jacobian per output."""
    point = [np.array(v, copy=True) for v in values]
    flat = point[position].reshape(-1)
    rows: list[list[np.ndarray]] = []
    for e in range(flat.size):
        original = flat[e]
        flat[e] = original + delta
        plus = run(*point)
        flat[e] = original - delta
        minus = run(*point)
        flat[e] = original
        with np.errstate(invalid="ignore", over="ignore"):   # outputs that are not finite: compared as such
            rows.append([(np.asarray(p, np.float64) - np.asarray(m, np.float64)).reshape(-1) / (2 * delta)
                         for p, m in zip(plus, minus)])
    count = len(rows[0]) if rows else len(run(*point))
    return [np.stack([r[k] for r in rows]) if rows else np.zeros((0, 0)) for k in range(count)]


def rule_jacobian(trial: Trial, session: Session, k: int, y_shape: tuple[int, ...]) -> list[np.ndarray]:
    """The rule's Jacobian of output ``k`` alone (the others' gradients None) w.r.t. each float
    input: (x size, y size) each, built from unit cotangents."""
    xs = x_positions(trial)
    y = trial.op.outputs[k]
    with trial.graph.as_default():
        dy = apply_op("Placeholder", dtype=y.known_dtype, shape=list(y_shape), name=f"check/unit{k}")
        grads = gradients([y], [trial.inputs[trial.varied[p]] for p in xs], grad_ys=[dy], name=f"check/output{k}")
    present = [as_dense(g) for g in grads if g is not None]
    run = session.make_callable(present, [*(trial.inputs[i] for i in trial.varied), dy])
    varied = [trial.values[i] for i in trial.varied]
    size = int(np.prod(y_shape, dtype=np.int64))
    sizes = [trial.values[trial.varied[p]].size for p in xs]
    jacobians = [np.zeros((n, size)) for n in sizes]
    unit = np.zeros(y_shape, y.known_dtype.storage)
    for j in range(size):
        unit.reshape(-1)[:] = 0
        unit.reshape(-1)[j] = 1
        got = iter(run(*varied, unit) if present else [])
        for a, g in enumerate(grads):
            if g is not None:
                jacobians[a][:, j] = np.asarray(next(got), np.float64).reshape(-1)
    return jacobians


def check_first_order(report: OpReport, trial: Trial, session: Session, vjp: Vjp) -> bool:
    """The rule's Jacobians against central differences (or the case's vjp). True if they pass."""
    if trial.case.vjp is not None:
        return _check_against_vjp(report, trial, session, vjp)
    dtype = trial.dtype
    tolerance = max(trial.case.tolerance, FLOAT32_TOLERANCE if dtype is not None and dtype.name != "float64" else 0)
    varied = [trial.values[i] for i in trial.varied]
    run = forward(session, trial, vjp.y_indices)
    shapes = [v.shape for v in run(*varied)]
    steps = STEPS.get(dtype.name if dtype is not None else "", STEPS["float32"])
    ok = True
    expected_combined = [np.zeros(trial.values[trial.varied[p]].size) for p in vjp.x_positions]
    differences: dict[tuple[int, float], list[np.ndarray]] = {}   # (input, step) -> one Jacobian per output
    for yi, (k, y_shape) in enumerate(zip(vjp.y_indices, shapes)):
        rule = rule_jacobian(trial, session, k, y_shape)
        for a, p in enumerate(vjp.x_positions):
            best = None
            for delta in steps:
                if (p, delta) not in differences:
                    differences[p, delta] = numerical(run, varied, p, delta)
                fd = differences[p, delta][yi]
                found = largest_error(rule[a], fd)
                if best is None or found[1] < best[0][1]:
                    best = (found, fd)
                if found[1] <= tolerance:
                    break
            assert best is not None
            (error, relative, index), fd = best
            expected_combined[a] += fd @ vjp.cotangents[yi].reshape(-1).astype(np.float64)
            if relative > tolerance:
                ok = False
                x_index, y_index = np.unravel_index(index, rule[a].shape)
                name = trial.input_names[trial.varied[p]]
                report.fail(dtype, "gradient", f"the rule's derivative of output {k} w.r.t. input '{name}' differs "
                            f"from finite differences: largest error {error:.3g} (rule {rule[a].flat[index]:.6g}, "
                            f"finite differences {fd.flat[index]:.6g}) at input element "
                            f"{element(varied[p].shape, int(x_index))}, output element "
                            f"{element(y_shape, int(y_index))}", error, trial.case.describe())
    if ok and len(vjp.y_indices) > 1:
        ok = _check_combined(report, trial, vjp, expected_combined, tolerance)
    if ok:
        report.passes(dtype, "gradient (finite differences)")
    return ok


def _check_combined(report: OpReport, trial: Trial, vjp: Vjp, expected: list[np.ndarray], tolerance: float) -> bool:
    """All outputs' cotangents at once must give the sum of each output's gradient."""
    for a, p in enumerate(vjp.x_positions):
        error, relative, index = largest_error(vjp.values[a].reshape(-1), expected[a])
        if relative > tolerance:
            name = trial.input_names[trial.varied[p]]
            report.fail(trial.dtype, "gradient of several outputs", f"with cotangents on all {len(vjp.y_indices)} "
                        f"outputs the gradient of input '{name}' is not the sum of each output's: largest error "
                        f"{error:.3g} at element {element(vjp.values[a].shape, index)}", error, trial.case.describe())
            return False
    return True


def _reference(trial: Trial, cotangents: dict[int, np.ndarray]) -> list[Any]:
    """The case's vjp at the trial's values, one gradient per flat input."""
    assert trial.case.vjp is not None
    outputs = [cotangents.get(k) for k in range(len(trial.op.outputs))]
    result = trial.case.vjp(*trial.values, *outputs)
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _check_against_vjp(report: OpReport, trial: Trial, session: Session, vjp: Vjp) -> bool:
    """A surrogate rule: its gradients for one output's cotangent at a time, and for all at
    once, against the case's NumPy vjp."""
    trials: list[tuple[str, dict[int, np.ndarray], list[np.ndarray] | None]] = \
        [(f"output {k}", {k: c}, None) for k, c in zip(vjp.y_indices, vjp.cotangents)] if len(vjp.y_indices) > 1 else []
    trials.append(("all outputs" if len(vjp.y_indices) > 1 else "", dict(zip(vjp.y_indices, vjp.cotangents)),
                   vjp.values))
    for what, cotangents, values in trials:
        if values is None:   # one output's cotangent, the others zero
            zeroed = Vjp(vjp.x_positions, vjp.y_indices, [cotangents.get(k, np.zeros_like(c)) for k, c in
                                                          zip(vjp.y_indices, vjp.cotangents)],
                         vjp.placeholders, vjp.grads, [])
            values = run_vjp(session, trial, zeroed, [trial.values[i] for i in trial.varied])
        expected = _reference(trial, cotangents)
        for a, p in enumerate(vjp.x_positions):
            index = trial.varied[p]
            want = expected[index] if index < len(expected) else None
            want = np.zeros_like(values[a]) if want is None else np.broadcast_to(np.asarray(want, np.float64),
                                                                                 values[a].shape)
            error, relative, flat = largest_error(values[a], want)
            if relative > trial.case.tolerance:
                name = trial.input_names[index]
                report.fail(trial.dtype, "gradient", f"the rule's gradient of input '{name}'"
                            f"{' (cotangent on ' + what + ')' if what else ''} differs from the case's vjp: largest "
                            f"error {error:.3g} (rule {values[a].flat[flat]:.6g}, vjp {want.flat[flat]:.6g}) at "
                            f"element {element(values[a].shape, flat)}", error, trial.case.describe())
                return False
    report.passes(trial.dtype, "gradient (the case's vjp)")
    return True


def check_unknown_shapes(report: OpReport, trial: Trial, vjp: Vjp) -> None:
    """The gradient built on Placeholders of unknown rank gives the same values."""
    try:
        blind = build_trial(trial.case, trial.dtype, known_shapes=False, values=[trial.values[i] for i in trial.varied])
        session = Session(blind.graph, backend="numpy")
        with blind.graph.as_default():
            placeholders = [apply_op("Placeholder", dtype=blind.op.outputs[k].known_dtype, shape=None,
                                     name=f"check/cotangent{k}") for k in vjp.y_indices]
            grads = gradients([blind.op.outputs[k] for k in vjp.y_indices],
                              [blind.inputs[blind.varied[p]] for p in vjp.x_positions], grad_ys=placeholders)
        shadow = Vjp(vjp.x_positions, vjp.y_indices, vjp.cotangents, placeholders,
                     [None if g is None else as_dense(g) for g in grads], [])
        values = run_vjp(session, blind, shadow, [blind.values[i] for i in blind.varied])
    except GradregError as exc:
        report.fail(trial.dtype, "gradient with unknown shapes", f"building or running the gradient on inputs of "
                    f"unknown shape fails: {exc}", case=trial.case.describe())
        return
    for a, p in enumerate(vjp.x_positions):
        error, relative, index = largest_error(values[a], vjp.values[a])
        if relative > 1e-9:
            name = trial.input_names[trial.varied[p]]
            report.fail(trial.dtype, "gradient with unknown shapes", f"the gradient of input '{name}' built on inputs "
                        f"of unknown shape differs from the one built on known shapes: largest error {error:.3g} at "
                        f"element {element(values[a].shape, index)}", error, trial.case.describe())
            return
    report.passes(trial.dtype, "gradient with unknown shapes")


def check_second_order(report: OpReport, trial: Trial, session: Session, vjp: Vjp) -> None:
    """The gradient of each input's gradient (at the vjp's cotangents) against differences of it."""
    xs = [(a, p) for a, (p, g) in enumerate(zip(vjp.x_positions, vjp.grads)) if g is not None]
    tolerance = max(trial.case.tolerance, FLOAT32_TOLERANCE if trial.dtype is not None and
                    trial.dtype.name != "float64" else 0) * 10
    varied = [trial.values[i] for i in trial.varied]
    feed_list = [*(trial.inputs[i] for i in trial.varied), *vjp.placeholders]
    steps = STEPS.get(trial.dtype.name if trial.dtype is not None else "", STEPS["float32"])
    for a, _ in xs:
        g = vjp.grads[a]
        assert g is not None
        first = session.make_callable(g, feed_list)

        def gradient_of(*values: np.ndarray, first: Callable[..., Any] = first) -> list[np.ndarray]:
            return [np.asarray(first(*values, *vjp.cotangents))]
        try:
            rule = rule_jacobian_of(trial, session, g, vjp)
        except NoGradientError as exc:
            report.skip(trial.dtype, "second order", f"the rule's gradient graph has no gradient itself ({exc})")
            return
        except GradregError as exc:
            report.fail(trial.dtype, "second order", f"differentiating the rule's gradient fails: {exc}",
                        case=trial.case.describe())
            return
        for b, p in enumerate(vjp.x_positions):
            best = None
            for delta in steps:
                fd = numerical(gradient_of, varied, p, delta)[0]
                found = largest_error(rule[b], fd)
                if best is None or found[1] < best[1]:
                    best = found
                if found[1] <= tolerance:
                    break
            assert best is not None
            error, relative, index = best
            if relative > tolerance:
                names = [trial.input_names[trial.varied[q]] for q in (vjp.x_positions[a], p)]
                report.fail(trial.dtype, "second order", f"the derivative of input '{names[0]}''s gradient w.r.t. "
                            f"input '{names[1]}' differs from finite differences: largest error {error:.3g}", error,
                            trial.case.describe())
                return
    report.passes(trial.dtype, "second order")


def rule_jacobian_of(trial: Trial, session: Session, g: Tensor, vjp: Vjp) -> list[np.ndarray]:
    """The Jacobian of gradient tensor ``g`` w.r.t. each float input, through the rules of its ops."""
    xs = [trial.inputs[trial.varied[p]] for p in vjp.x_positions]
    with trial.graph.as_default():
        ddx = apply_op("Placeholder", dtype=g.known_dtype, shape=g.shape.as_list() if g.shape.is_fully_defined()
                       else None, name="check/second_order_unit")
        second = gradients([g], xs, grad_ys=[ddx], name="check/second_order")
    present = [as_dense(s) for s in second if s is not None]
    feed_list = [*(trial.inputs[i] for i in trial.varied), *vjp.placeholders, ddx]
    run = session.make_callable(present, feed_list)
    varied = [trial.values[i] for i in trial.varied]
    shape = vjp.values[vjp.grads.index(g)].shape
    size = int(np.prod(shape, dtype=np.int64))
    jacobians = [np.zeros((trial.values[trial.varied[p]].size, size)) for p in vjp.x_positions]
    unit = np.zeros(shape, g.known_dtype.storage)
    for j in range(size):
        unit.reshape(-1)[:] = 0
        unit.reshape(-1)[j] = 1
        got = iter(run(*varied, *vjp.cotangents, unit) if present else [])
        for b, s in enumerate(second):
            if s is not None:
                jacobians[b][:, j] = np.asarray(next(got), np.float64).reshape(-1)
    return jacobians


def check_claim(report: OpReport, trial: Trial, session: Session) -> None:
    """A NotDifferentiable claim: where an output is a float function of a float input, central
    differences at two small steps must be zero, or disagree (a jump, not a slope)."""
    xs = x_positions(trial)
    ys = trial.float_outputs()
    if not xs or not ys:
        report.passes(trial.dtype, "not differentiable (no float input or output)")
        return
    varied = [trial.values[i] for i in trial.varied]
    run = forward(session, trial, ys)
    shapes = [v.shape for v in run(*varied)]
    for p in xs:
        wide, narrow = numerical(run, varied, p, 1e-6), numerical(run, varied, p, 1e-7)
        for yi, (w, n) in enumerate(zip(wide, narrow)):
            slope = (np.abs(w) > 1e-6) & (np.abs(w - n) <= 0.1 * np.abs(w))
            if slope.any():
                index = int(np.argmax(np.where(slope, np.abs(w), 0)))
                x_index, y_index = np.unravel_index(index, w.shape)
                name = trial.input_names[trial.varied[p]]
                report.fail(trial.dtype, "not differentiable", f"the plugin declares the op not differentiable, but "
                            f"output {ys[yi]} has derivative {w.flat[index]:.6g} w.r.t. input '{name}' (largest error "
                            f"{abs(w.flat[index]):.3g} from zero) at input element "
                            f"{element(varied[p].shape, int(x_index))}, output element "
                            f"{element(shapes[yi], int(y_index))}", abs(float(w.flat[index])), trial.case.describe())
                return
    report.passes(trial.dtype, "not differentiable (finite differences are zero)")
