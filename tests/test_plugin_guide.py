"""The plugin author's guide (docs/plugins.md) works as written: the two packages it builds, piece
by piece, are plugins/gradreg-straight-through and plugins/gradreg-swish file for file; made from
the guide's code blocks in a temporary directory and pip-installed into a fresh virtual
environment, each passes its own tests and gradreg's plugin checker (``pytest`` runs both, from
the ``addopts`` of its pyproject.toml), `gradreg plugins` lists what the guide says, and every
program the guide shows runs."""
from __future__ import annotations

import json
import os
import pathlib
import site
import subprocess
import sys
import sysconfig

import pytest
from plugin_guide import REPO, read_guide

PACKAGES = ("gradreg-straight-through", "gradreg-swish")
PROVIDES = {"op": ["Swish"], "kernel:numpy": ["Swish"], "kernel:numba": ["Swish"], "shape": ["Swish"],
            "gradient": ["Swish"], "builder": ["nn.swish", "swish"]}


def _shipped(package: str) -> set[str]:
    root = REPO / "plugins" / package
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
            and not any(part.endswith((".egg-info", "__pycache__")) or part == "build" for part in p.parts)}


def test_the_guides_packages_are_the_plugins_file_for_file():
    guide = read_guide()
    assert {path.split("/", 1)[0] for path in guide.files} == set(PACKAGES)
    for package in PACKAGES:
        in_guide = {path.split("/", 1)[1] for path in guide.files if path.startswith(package + "/")}
        assert in_guide == _shipped(package) - {"README.md"}, package
        for path in in_guide:
            assert guide.file_text(f"{package}/{path}") == (REPO / "plugins" / package / path).read_text(), path


def test_the_readmes_promise_what_gradreg_plugins_lists():
    readme = (REPO / "plugins" / "gradreg-swish" / "README.md").read_text()
    assert 'lists "swish" with its op, kernels (numpy, numba), shape function, gradient, builders' in readme
    assert "gradreg.swish(x)" in readme and "gradreg.nn.swish(x)" in readme
    readme = (REPO / "plugins" / "gradreg-straight-through" / "README.md").read_text()
    assert "gradreg plugins --op Round       # the gradient: rule from straight_through" in readme


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A package made from the guide's blocks, pip-installed into a new virtual environment that
    sees this environment's packages (gradreg, numpy, numba, pytest) through a .pth file."""
    root = tmp_path_factory.mktemp("guide")
    guide = read_guide()
    for path in guide.files:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(guide.file_text(path))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    child_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    parents = dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
    pathlib.Path(child_site, "parent_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in parents))
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", *(str(root / p) for p in PACKAGES)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return python, root, guide


def _run(python, *args, cwd):
    env = dict(os.environ, GRADREG_CACHE_DIR=str(cwd / "numba-cache"))
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600, env=env, cwd=cwd)


@pytest.mark.slow
@pytest.mark.parametrize("package, tests", [("gradreg-straight-through", 3), ("gradreg-swish", 8)])
def test_each_installed_package_passes_its_own_tests_and_the_plugin_checker(installed, package, tests):
    python, root, _ = installed
    # TensorFlow and onnxruntime are left out here (they cost a start-up each): tests/test_plugin_check.py
    # checks the comparisons with them.
    done = _run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "--gradreg-check-references", "none",
                cwd=root / package)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = done.stdout.count("PASSED ::gradreg-check[")
    assert checks == {"gradreg-straight-through": 2, "gradreg-swish": 1}[package], done.stdout
    assert f"{tests + checks} passed" in done.stdout


@pytest.mark.slow
def test_gradreg_plugins_lists_what_the_guide_says(installed):
    python, root, _ = installed
    done = _run(python, "-m", "gradreg", "plugins", "--json", cwd=root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    plugins = {p["name"]: p for p in report["plugins"]}
    swish = plugins["swish"]
    assert swish["distribution"] == "gradreg-swish" and swish["errors"] == []
    assert swish["provides"] == PROVIDES
    straight = plugins["straight_through"]
    assert straight["distribution"] == "gradreg-straight-through" and straight["errors"] == []
    assert straight["provides"] == {"gradient": ["Floor", "Round"]} and straight["overrides"] == ["Floor", "Round"]
    assert report["conflicts"] == {} and report["resolved"] == {}


@pytest.mark.slow
def test_gradreg_plugins_check_passes_the_package_of_rules(installed):
    python, root, _ = installed
    done = _run(python, "-m", "gradreg", "plugins", "--check", "gradreg-straight-through", "--references", "none",
                cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "gradreg-straight-through (plugins straight_through): 2 op types, 14 checks passed, " \
                          "0 failed\n"


@pytest.mark.slow
def test_every_program_in_the_guide_runs(installed):
    python, root, guide = installed
    assert len(guide.programs) >= 6
    for number, program in enumerate(guide.programs):
        workdir = root / f"program{number}"
        workdir.mkdir(exist_ok=True)
        done = _run(python, "-c", program, cwd=workdir)
        assert done.returncode == 0, f"program {number}:\n{program}\n{done.stdout}{done.stderr}"
