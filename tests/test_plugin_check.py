"""The plugin checker (gradreg.testing.check_plugin, family.case): each check passes a right plugin
and fails a wrong one with a message naming the op type, the dtype, the input and the largest
error. Families are registered at run time; tests/test_third_party_plugin.py checks pip-installed
packages through ``pytest --gradreg-check`` and ``gradreg plugins --check``."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradreg as gr
from gradreg.cli import main
from gradreg.errors import PluginError
from gradreg.plugin import OpFamily, apply_op, shape_fns
from gradreg.registry import PluginSource, get_registry
from gradreg.registry.cases import make_case
from gradreg.testing import check_op, check_plugin, plugins_of
from gradreg.testing.trials import build_trial

NO_REFERENCES = ()


@contextlib.contextmanager
def registered(family: OpFamily):
    registry = get_registry()
    registry.add_plugin(PluginSource(family.name, lambda: family))
    try:
        yield family
    finally:
        registry.remove_plugin(family.name)


def cube_family(name: str, factor: float) -> OpFamily:
    """x ** 3 under op type ``<name>Cube``, its rule ``factor * x**2`` (right when factor is 3)."""
    family = OpFamily(name)
    op_type = f"{name.title().replace('_', '')}Cube"
    family.op(op_type, inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32, float64}"], shape=shape_fns.unchanged)
    family.simple_kernel(op_type, lambda x: x * x * x)

    @family.gradient(op_type)
    def _grad(op, grad):
        x = op.inputs[0]
        return grad * factor * x * x
    return family


def test_a_right_rule_passes_every_check():
    with registered(cube_family("kit_right", 3.0)):
        report = check_plugin("kit_right", references=NO_REFERENCES)
    assert report.ok, "\n".join(map(str, report.failures))
    (op,) = report.ops
    assert op.op_type == "KitRightCube" and op.provides == ("op", "shape", "kernel:numpy", "gradient")
    for check in ("float64 gradient (finite differences)", "float64 gradient with unknown shapes",
                  "float64 second order", "float64 kernel and shape function",
                  "float32 gradient within tolerance of the wider type's"):
        assert check in op.passed
    assert "float64 graphdef round trip (provenance kit_right:KitRightCube)" in op.passed


def test_a_wrong_rule_fails_naming_the_op_dtype_input_and_largest_error():
    with registered(cube_family("kit_wrong", 2.0)):
        report = check_plugin("kit_wrong", references=NO_REFERENCES)
        x = build_trial(make_case("KitWrongCube", [[2, 3]], label="the default case [2, 3]"), gr.float64).values[0]
    assert not report.ok
    (failure,) = report.failures
    assert (failure.plugin, failure.op_type, failure.dtype, failure.check) == ("kit_wrong", "KitWrongCube",
                                                                               "float64", "gradient")
    # The rule gives 2 x^2 where the derivative is 3 x^2: the largest error is the largest x^2.
    assert failure.error == pytest.approx(np.max(x * x), rel=1e-6)
    assert "w.r.t. input 'x'" in failure.message and f"largest error {failure.error:.3g}" in failure.message
    assert str(failure).startswith("KitWrongCube float64 [the default case [2, 3]]: gradient: ")


def test_a_false_not_differentiable_claim_fails_and_a_true_one_passes():
    family = OpFamily("kit_claims")
    family.op("KitTwice", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float64}"], shape=shape_fns.unchanged)
    family.simple_kernel("KitTwice", lambda x: 2 * x)
    family.op("KitStep", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float64}"], shape=shape_fns.unchanged)
    family.simple_kernel("KitStep", lambda x: np.floor(4 * x))
    family.not_differentiable("KitTwice", "KitStep")
    with registered(family):
        twice = check_op("kit_claims", "KitTwice", NO_REFERENCES)
        step = check_op("kit_claims", "KitStep", NO_REFERENCES)
    (failure,) = twice.failures
    assert failure.check == "not differentiable" and failure.dtype == "float64"
    assert failure.error == pytest.approx(2.0, rel=1e-6)
    assert "has derivative 2 w.r.t. input 'x'" in failure.message
    assert step.ok and "float64 not differentiable (finite differences are zero)" in step.passed
    assert twice.provides == ("op", "shape", "kernel:numpy", "not differentiable")


def sincos_family(name: str, use_cos_gradient: bool) -> OpFamily:
    family = OpFamily(name)
    family.op("KitSinCos", inputs=["x: T"], outputs=["s: T", "c: T"], attrs=["T: {float64}"],
              shape=lambda ctx: [ctx.input_shape(0), ctx.input_shape(0)])
    family.simple_kernel("KitSinCos", lambda x: (np.sin(x), np.cos(x)))

    @family.gradient("KitSinCos")
    def _grad(op, grad_s, grad_c):
        x = op.inputs[0]
        result = grad_s * apply_op("Cos", x)
        return result - grad_c * apply_op("Sin", x) if use_cos_gradient else result
    family.case("KitSinCos", [2, 2], domain=(-3, 3))
    return family


def test_a_multi_output_rule_is_checked_per_output():
    with registered(sincos_family("kit_sincos", True)):
        right = check_op("kit_sincos", "KitSinCos", NO_REFERENCES)
    with registered(sincos_family("kit_sincos_wrong", False)):
        wrong = check_op("kit_sincos_wrong", "KitSinCos", NO_REFERENCES)
        x = build_trial(make_case("KitSinCos", [[2, 2]], domain=(-3, 3)), gr.float64).values[0]
    assert right.ok and "float64 gradient (finite differences)" in right.passed
    (failure,) = wrong.failures
    assert failure.check == "gradient" and "derivative of output 1 w.r.t. input 'x'" in failure.message
    assert failure.error == pytest.approx(np.max(np.abs(np.sin(x))), rel=1e-6)


def test_a_shape_function_that_disagrees_with_the_kernel_fails():
    family = OpFamily("kit_shapes")
    family.op("KitTranspose", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float64}"],
              shape=shape_fns.unchanged)    # wrong: the kernel transposes
    family.simple_kernel("KitTranspose", lambda x: x.T.copy())
    with registered(family):
        report = check_op("kit_shapes", "KitTranspose", NO_REFERENCES)
    assert [f.check for f in report.failures] == ["shape function"]
    assert "the shape function gives output 0 the shape (2, 3); the kernel returns (3, 2)" in report.failures[0].message


def test_a_kernel_returning_the_wrong_dtype_fails():
    family = OpFamily("kit_dtypes")
    family.op("KitWiden", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32, float64}"],
              shape=shape_fns.unchanged)
    family.simple_kernel("KitWiden", lambda x: x.astype(np.float64) + 1)
    with registered(family):
        report = check_op("kit_dtypes", "KitWiden", NO_REFERENCES)
    (failure,) = report.failures
    assert (failure.dtype, failure.check) == ("float32", "kernel")
    assert failure.message == "output 0 is float64; the graph says float32 (stored as float32)"


def test_a_rule_that_needs_static_shapes_fails_the_unknown_shape_check():
    family = OpFamily("kit_static")
    family.op("KitSquare", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float64}"], shape=shape_fns.unchanged)
    family.simple_kernel("KitSquare", lambda x: x * x)

    @family.gradient("KitSquare")
    def _grad(op, grad):
        x = op.inputs[0]
        x.shape.as_list()     # a rule that reads the static shape fails on inputs of unknown rank
        return grad * 2.0 * x
    with registered(family):
        report = check_op("kit_static", "KitSquare", NO_REFERENCES)
    assert [f.check for f in report.failures] == ["gradient with unknown shapes"]
    assert "float64 gradient (finite differences)" in report.passed


def straight_through(name: str, vjp) -> OpFamily:
    family = OpFamily(name, overrides=["Floor"])

    @family.gradient("Floor")
    def _grad(op, grad):
        return grad
    family.case("Floor", [2, 3], domain=(-3, 3), vjp=vjp)
    return family


def test_a_surrogate_rule_is_checked_against_its_declared_vjp():
    with registered(straight_through("kit_straight", lambda x, dy: dy)):
        right = check_op("kit_straight", "Floor", NO_REFERENCES)
    with registered(straight_through("kit_crooked", lambda x, dy: 2 * dy)):
        wrong = check_op("kit_crooked", "Floor", NO_REFERENCES)
    assert right.ok and "float64 gradient (the case's vjp)" in right.passed
    assert right.provides == ("gradient", "cases")
    (failure,) = wrong.failures
    assert failure.check == "gradient" and "differs from the case's vjp" in failure.message
    assert get_registry().gradients.lookup("Floor").plugin == "math"    # both are gone again


def test_an_op_whose_inputs_the_checker_cannot_guess_asks_for_a_case():
    family = OpFamily("kit_nocase")
    family.op("KitRepeat", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float64}", "times: int"])
    family.simple_kernel("KitRepeat", lambda x: x)
    with registered(family):
        report = check_op("kit_nocase", "KitRepeat", NO_REFERENCES)
    (failure,) = report.failures
    assert failure.check == "cases" and "family.case('KitRepeat', [2, 3], ...)" in failure.message


def test_cases_are_validated_when_declared():
    with pytest.raises(PluginError, match="input 0 has a negative dimension"):
        make_case("X", [[2, -1]])
    with pytest.raises(PluginError, match=r"domain \(1.0, 1.0\) is empty"):
        make_case("X", [[2]], domain=(1, 1))
    with pytest.raises(PluginError, match="is not a dtype"):
        make_case("X", [[2]], dtypes=["float99"])
    case = make_case("X", [[2], np.array([1], np.int32)], domain=[(0, 1), None], dtypes=[gr.float32])
    assert case.domain_of(0) == (0.0, 1.0) and case.domain_of(1) == (-1.0, 1.0) and case.dtypes == ("float32",)
    assert case.describe() == "[2], fixed 1"


def test_fixed_inputs_and_attrs_of_a_case_are_used():
    family = OpFamily("kit_fixed")
    family.op("KitScale", inputs=["x: T", "factor: int32"], outputs=["y: T"], attrs=["T: {float64}", "offset: float"],
              shape=shape_fns.unchanged)
    family.kernel("KitScale")(lambda op, ctx: lambda x, factor: x * factor + op.get_attr("offset"))
    family.gradient("KitScale")(lambda op, grad: (grad * apply_op("Cast", op.inputs[1], DstT=gr.float64), None))
    family.case("KitScale", [2, 3], np.array(3, np.int32), attrs={"offset": 0.5}, label="times 3 plus a half")
    with registered(family):
        report = check_op("kit_fixed", "KitScale", NO_REFERENCES)
        trial = build_trial(family.cases["KitScale"][0], gr.float64)
        y = gr.Session(trial.graph).run(trial.outputs[0], trial.feeds())
    assert report.ok, report.describe()
    np.testing.assert_allclose(y, trial.values[0] * 3 + 0.5)
    assert trial.input_names == ["x", "factor"] and trial.varied == [0]    # the fixed factor is not fed
    assert {"float64 gradient (finite differences)", "float64 second order"} <= set(report.passed)


def test_plugins_of_matches_plugin_distribution_and_module_names():
    assert plugins_of("math") == ["math"]
    assert "math" in plugins_of("gradreg") and "nn" in plugins_of("gradreg")
    with pytest.raises(PluginError, match="no installed gradreg plugin comes from 'no-such-package'"):
        plugins_of("no-such-package")


def test_gradreg_plugins_check_prints_one_line_per_failure_and_exits_1(capsys):
    with registered(cube_family("kit_cli", 2.0)):
        code = main(["plugins", "--check", "kit_cli", "--references", "none"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0].startswith("FAILED kit_cli: KitCliCube float64 [the default case [2, 3]]: gradient: the rule's "
                             "derivative of output 0 w.r.t. input 'x' differs from finite differences: largest error ")
    assert out[1].startswith("kit_cli (plugins kit_cli): 1 op types, ") and out[1].endswith(" 1 failed")
    assert len(out) == 2


def test_gradreg_plugins_check_exits_0_on_a_right_package_and_2_on_an_unknown_one(capsys):
    with registered(cube_family("kit_cli_right", 3.0)):
        assert main(["plugins", "--check", "kit_cli_right", "--references", "none"]) == 0
    assert capsys.readouterr().out.endswith(" 0 failed\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["plugins", "--check", "kit-no-such-package"])
    assert exit_info.value.code == 2


def test_the_pytest_plugin_adds_one_test_per_op_type(tmp_path):
    """``pytest --gradreg-check NAME`` in a project whose conftest registers two families at run time."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import numpy as np
        from gradreg.plugin import OpFamily, shape_fns
        from gradreg.registry import PluginSource, get_registry

        def family(name, factor):
            f = OpFamily(name)
            f.op(name.title() + "Cube", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float64}"],
                 shape=shape_fns.unchanged)
            f.simple_kernel(name.title() + "Cube", lambda x: x * x * x)
            f.gradient(name.title() + "Cube")(lambda op, grad: grad * factor * op.inputs[0] * op.inputs[0])
            return f

        for name, factor in (("good", 3.0), ("bad", 2.0)):
            get_registry().add_plugin(PluginSource(name, lambda f=family(name, factor): f))
    """))
    (tmp_path / "test_nothing.py").write_text("def test_ordinary():\n    assert 1 + 1 == 2\n")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                               "-q", "-rf", "--gradreg-check-references", "none", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
    both = run("--gradreg-check", "good", "--gradreg-check", "bad")
    assert both.returncode == 1, both.stdout + both.stderr
    assert "1 failed, 2 passed" in both.stdout      # test_ordinary and GoodCube pass
    assert "FAILED ::gradreg-check[bad::BadCube]" in both.stdout
    assert "FAILED BadCube float64 [the default case [2, 3]]: gradient: the rule's derivative of output 0 w.r.t. " \
           "input 'x' differs from finite differences: largest error " in both.stdout
    unknown = run("--gradreg-check", "nothing-like-it")
    assert unknown.returncode == 4 and "no installed gradreg plugin comes from 'nothing-like-it'" in unknown.stderr


def test_the_checker_leaves_the_process_as_it_found_it():
    import warnings
    before = (list(warnings.filters), np.geterr())
    with registered(cube_family("kit_manners", 3.0)):
        check_plugin("kit_manners", references=NO_REFERENCES)
    assert (list(warnings.filters), np.geterr()) == before


def test_gradient_graphs_are_compared_with_tensorflow_and_onnxruntime_where_installed():
    pytest.importorskip("tensorflow")
    pytest.importorskip("onnxruntime")
    with registered(sincos_family("kit_sincos_references", True)):
        report = check_op("kit_sincos_references", "KitSinCos", ("tensorflow", "onnxruntime"))
    assert report.ok, report.describe()
    assert {"float64 tensorflow runs the gradient graph", "float64 onnx (gradient) round trip and onnxruntime"} <= \
        set(report.passed)
    assert "float64 onnx (outputs): not written as ONNX: node 'KitSinCos' (op KitSinCos) has no ONNX equivalent" in \
        " ".join(report.skipped)


def softplus_family(name: str, offset: float, departs: str = "") -> OpFamily:
    """Softplus's kernel (off by ``offset``) and its gradient (right), overriding the nn family's."""
    family = OpFamily(name, overrides=["Softplus"])
    family.simple_kernel("Softplus", lambda x: np.logaddexp(0, x) + offset)
    family.gradient("Softplus")(lambda op, grad: grad * apply_op("Sigmoid", op.inputs[0]))
    family.case("Softplus", [2, 3], dtypes=["float64"], departs_from_tensorflow=departs)
    return family


def test_a_kernel_is_compared_with_tensorflows_and_a_rule_with_its_gradient():
    pytest.importorskip("tensorflow")
    with registered(softplus_family("kit_softplus", 0.0)):
        right = check_op("kit_softplus", "Softplus", ("tensorflow",))
    with registered(softplus_family("kit_softplus_off", 0.01)):
        off = check_op("kit_softplus_off", "Softplus", ("tensorflow",))
    with registered(softplus_family("kit_softplus_departs", 0.0, departs="a rule of our own")):
        departs = check_op("kit_softplus_departs", "Softplus", ("tensorflow",))
    assert right.ok, right.describe()
    assert {"float64 tensorflow's kernel", "float64 tensorflow's gradient",
            "float64 tensorflow runs the gradient graph"} <= set(right.passed)
    (failure,) = off.failures
    assert (failure.dtype, failure.check) == ("float64", "tensorflow's kernel")
    assert failure.error == pytest.approx(0.01, rel=1e-9)
    assert "float64 tensorflow's gradient: the case departs from it: a rule of our own" in departs.skipped
    assert get_registry().kernels("numpy").lookup("Softplus").plugin == "nn"
