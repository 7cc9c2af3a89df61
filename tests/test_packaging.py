"""The package as pip sees it: one version (pyproject.toml's), the Apache-2.0 license with its
NOTICE, project URLs, type information (py.typed) — in the installed metadata and in a built wheel."""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import json
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

import gradreg

REPO = pathlib.Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib")   # Python 3.11+
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_version_has_one_source_pyproject():
    assert PYPROJECT["project"]["version"] == importlib.metadata.version("gradreg") == gradreg.__version__
    assert "version" not in PYPROJECT["project"].get("dynamic", [])
    assert not re.search(r"__version__\s*=\s*['\"]\d+\.\d+", (REPO / "gradreg" / "__init__.py").read_text())


def test_the_license_is_an_spdx_expression_with_its_files():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE", "NOTICE"]
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))   # PEP 639: one or the other
    requires = PYPROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires)
    metadata = importlib.metadata.metadata("gradreg")
    assert metadata["License-Expression"] == "Apache-2.0"
    assert sorted(metadata.get_all("License-File")) == ["LICENSE", "NOTICE"]


def test_license_and_notice_texts():
    license_text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    notice = (REPO / "NOTICE").read_text()
    assert "TensorFlow" in notice and "Apache License, Version 2.0" in notice
    # Every proto file derived from TensorFlow's says so and points at the NOTICE.
    for proto in (REPO / "protos" / "gradreg" / "proto").glob("*.proto"):
        head = proto.read_text().splitlines()[:2]
        assert "Derived from TensorFlow's" in head[0] and "NOTICE" in head[1], proto.name
        assert proto.name in notice or proto.name == "graph.proto", proto.name


def test_no_project_url_points_nowhere_and_the_changelog_has_this_version():
    """The project has no public home yet: no Project-URL (those it had named a repository that
    does not exist)."""
    assert "urls" not in PYPROJECT["project"]
    assert not importlib.metadata.metadata("gradreg").get_all("Project-URL")
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and f"## [{gradreg.__version__}]" in changelog


def test_the_package_carries_type_information():
    assert importlib.resources.files("gradreg").joinpath("py.typed").is_file()
    assert "Typing :: Typed" in PYPROJECT["project"]["classifiers"]


def test_the_docs_extra_holds_the_reference_builders():
    docs = PYPROJECT["project"]["optional-dependencies"]["docs"]
    assert any(d.startswith("mkdocs>=") for d in docs) and any(d.startswith("mkdocstrings[python]") for d in docs)
    assert "mkdocs build --strict" in (REPO / ".ci" / "run").read_text()
    assert 'pip install ".[test,dev,docs]"' in (REPO / ".ci" / "run").read_text()


@pytest.mark.slow
def test_a_built_wheel_holds_the_licenses_the_type_marker_and_the_stubs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-q", "-w", str(tmp_path), str(REPO)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = tmp_path.glob("gradreg-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = f"gradreg-{gradreg.__version__}.dist-info"
    assert {f"{dist_info}/licenses/LICENSE", f"{dist_info}/licenses/NOTICE", "gradreg/py.typed",
            "gradreg/proto/graph_pb2.pyi", "gradreg_plugins/math/__init__.py"} <= names
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert not any(n.startswith(("tests/", "docs/")) for n in names)
    # `gradreg ops --missing` from the wheel alone: its census is package data
    assert "gradreg/registry/tf_gradient_registry.json" in names
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    script = (f"import sys; sys.path.insert(0, {str(unpacked)!r}); import gradreg.cli as cli; "
              f"assert cli.__file__.startswith({str(unpacked)!r}), cli.__file__; "
              f"sys.exit(cli.main(['ops', '--missing', '--json']))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    from gradreg.registry.census import coverage
    assert [m["op"] for m in json.loads(done.stdout)["missing"]] == coverage()["missing"]
