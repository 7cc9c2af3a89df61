"""Third-party plugins, end to end: plugins/gradreg-swish and the two packages of tests/plugins are
pip-installed into a fresh virtual environment beside gradreg. `gradreg plugins` lists them,
gradients through their ops are right and record which plugin made them; gradreg-sincos (an op
with two outputs, a NotDifferentiable op) passes `pytest --gradreg-check`, and gradreg-wrong (a
deliberately wrong rule) fails it, and `gradreg plugins --check`, naming the op, the dtype and the
largest error."""
from __future__ import annotations

import json
import os
import pathlib
import site
import subprocess
import sys
import sysconfig
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PLUGIN = REPO / "plugins" / "gradreg-swish"
PACKAGES = [PLUGIN, REPO / "tests" / "plugins" / "gradreg-sincos", REPO / "tests" / "plugins" / "gradreg-wrong"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory):
    """A new virtual environment that sees this environment's packages (gradreg, numpy, ...)
    through a .pth file, with gradreg-swish, gradreg-sincos and gradreg-wrong pip-installed into it."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    child_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    parent_paths = dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
    # addsitedir (not a bare path) so the parent's own .pth files (editable installs) apply too.
    lines = [f"import site; site.addsitedir({p!r})" for p in parent_paths]
    pathlib.Path(child_site, "parent_environment.pth").write_text("\n".join(lines) + "\n")
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", *map(str, PACKAGES)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def _run(python, *args, cwd=None):
    env = dict(os.environ, GRADREG_BACKEND="numpy")
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600, env=env,
                          cwd=cwd or python.parent)   # not the repository: gradreg comes from the installation


def test_gradreg_plugins_lists_the_installed_plugin(venv_python):
    done = _run(venv_python, "-m", "gradreg", "plugins", "--json")
    assert done.returncode == 0, done.stderr
    plugins = {p["name"]: p for p in json.loads(done.stdout)["plugins"]}
    swish = plugins["swish"]
    assert swish["distribution"] == "gradreg-swish" and swish["version"] == "0.1.0"
    assert swish["provides"] == {"op": ["Swish"], "kernel:numpy": ["Swish"], "kernel:numba": ["Swish"],
                                 "shape": ["Swish"], "gradient": ["Swish"], "builder": ["nn.swish", "swish"]}
    assert {"array", "math", "nn", "control_flow", "function_call"} <= set(plugins)
    assert json.loads(done.stdout)["conflicts"] == {}


def test_gradients_through_the_plugins_op_are_numerically_right(venv_python):
    script = textwrap.dedent("""
        import numpy as np
        import gradreg as gr
        from gradreg.testing import compute_gradient_error
        g = gr.Graph()
        with g.as_default():
            x = gr.placeholder(gr.float64, [3, 4], name="x")
            y = gr.swish(x) * 2.0
            (dx,) = gr.gradients(gr.reduce_sum(y), [x])
            error = compute_gradient_error(x, [3, 4], y, [3, 4])
        value = np.linspace(-3, 3, 12).reshape(3, 4)
        got = gr.Session(g).run(dx, {x: value})
        s = 1 / (1 + np.exp(-value))
        expected = 2 * (s + value * s * (1 - s))
        print(float(np.max(np.abs(got - expected))), error, y.op.inputs[0].op.type)
    """)
    done = _run(venv_python, "-c", script)
    assert done.returncode == 0, done.stderr
    max_diff, error, op_type = done.stdout.split()
    assert float(max_diff) < 1e-12
    assert float(error) < 1e-6
    assert op_type == "Swish"


def test_the_plugin_is_absent_from_this_environment():
    # Installing into the temporary environment did not leak into the one running the tests.
    from gradreg.registry import get_registry
    assert "swish" not in get_registry().plugins


def test_a_right_package_passes_pytest_gradreg_check(venv_python, tmp_path):
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert True\n")
    done = _run(venv_python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--gradreg-check", "gradreg-sincos",
                cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED ::gradreg-check[sincos::SinCos]" in done.stdout
    assert "PASSED ::gradreg-check[sincos::Heaviside]" in done.stdout
    assert "3 passed" in done.stdout


def test_a_wrong_rule_fails_pytest_gradreg_check_naming_op_dtype_and_largest_error(venv_python, tmp_path):
    done = _run(venv_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gradreg-check", "gradreg-wrong",
                "--gradreg-check-references", "none", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("FAILED Cube"))
    assert line.strip().startswith("FAILED Cube float64 [the default case [2, 3]]: gradient: the rule's derivative of "
                                   "output 0 w.r.t. input 'x' differs from finite differences: largest error ")
    # The rule gives 2 x^2 for 3 x^2: the error is the largest x^2 of the case's values, in [0, 1).
    error = float(line.split("largest error ")[1].split()[0])
    assert 0.5 < error < 1.0
    assert "1 failed" in done.stdout


def test_gradreg_plugins_check_exits_1_with_a_line_per_failure(venv_python):
    done = _run(venv_python, "-m", "gradreg", "plugins", "--check", "gradreg-wrong", "--references", "none")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("FAILED wrong: Cube float64 ")
    assert lines[1].startswith("gradreg-wrong (plugins wrong): 1 op types, ") and lines[1].endswith(", 1 failed")


def test_a_saved_gradient_graph_records_the_plugin_and_its_version(venv_python, tmp_path):
    script = textwrap.dedent(f"""
        import gradreg as gr
        g = gr.Graph()
        with g.as_default():
            x = gr.placeholder(gr.float32, [3], name="x")
            s, c = gr.sincos(x)
            (dx,) = gr.gradients(gr.reduce_sum(gr.swish(s) + c), [x])
        gr.save_graph(g, {str(tmp_path / "grad.pb")!r})
    """)
    done = _run(venv_python, "-c", script)
    assert done.returncode == 0, done.stderr
    done = _run(venv_python, "-m", "gradreg", "plugins", "--trace", str(tmp_path / "grad.pb"), "--json")
    assert done.returncode == 0, done.stderr
    rows = {(r["source"], r["rule"]): r for r in json.loads(done.stdout)["rules"]}
    assert (rows["swish", "Swish"]["distribution"], rows["swish", "Swish"]["version"]) == ("gradreg-swish", "0.1.0")
    assert (rows["sincos", "SinCos"]["distribution"], rows["sincos", "SinCos"]["version"]) == ("gradreg-sincos",
                                                                                              "1.0.0")
    assert rows["swish", "Swish"]["here"] == rows["sincos", "SinCos"]["here"] == "installed, same version"
    # Where the plugins are not installed, the trace says what to install.
    done = subprocess.run([sys.executable, "-m", "gradreg", "plugins", "--trace", str(tmp_path / "grad.pb")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "swish:Swish  from gradreg-swish==0.1.0" in done.stdout
    assert "here: not installed (pip install gradreg-swish==0.1.0)" in done.stdout
