"""The README is a user's document and the docs are complete (issue 32, points 5 and 9): the
README stays short, keeps its two contract commands (the quick start on the shipped example, the
test command .ci/run mirrors), links only to pages that exist, and carries no benchmark figures;
every docs page is in mkdocs.yml's navigation; docs/cli.md covers every command."""
from __future__ import annotations

import pathlib
import re

import pytest

from gradreg import cli

REPO = pathlib.Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
QUICK_START = ("pip install . && gradreg grad examples/mlp/model.pbtxt --ys loss --xs w1,b1,w2,b2 "
               "--feed examples/mlp/inputs.npz -o mlp_grad.pb")
TEST_COMMAND = 'pip install ".[test]" && python -m pytest -q'


def test_the_readme_is_short_and_keeps_its_contract_commands():
    assert len(README.splitlines()) <= 250
    assert f"    {QUICK_START}\n" in README and f"    {TEST_COMMAND}\n" in README
    for path in ("examples/mlp/model.pbtxt", "examples/mlp/inputs.npz"):
        assert (REPO / path).is_file(), path
    ci = (REPO / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and 'pip install ".[test' in ci


def test_the_readme_links_to_pages_that_exist():
    links = re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)(?:#[\w-]+)?\)", README)
    assert links
    for link in links:
        assert (REPO / link).is_file(), link


def test_benchmark_figures_live_in_the_benchmarks_page():
    assert not re.search(r"\d\.\d\dx (TensorFlow|TF|NumPy|JAX)", README)
    assert not re.search(r"(first|second|third|fourth|fifth|sixth|latest|this) session", README, re.I)
    benchmarks = (REPO / "docs" / "benchmarks.md").read_text()
    assert "0.76x / 0.81x / 0.93x" in benchmarks and "2026-11-28" in benchmarks and "2 vCPUs" in benchmarks


def test_every_docs_page_is_in_the_navigation():
    nav = (REPO / "mkdocs.yml").read_text()
    for page in (REPO / "docs").glob("*.md"):
        assert f": {page.name}" in nav, page.name


@pytest.mark.parametrize("page", ["cli.md", "index.md"])
def test_the_cli_docs_name_every_command(page):
    text = (REPO / "docs" / page).read_text()
    commands = [name for name in cli.build_parser()._subparsers._group_actions[0].choices]
    assert {"view", "tensorboard", "freeze"} <= set(commands)
    for command in commands:
        assert f"`{command}" in text or f"`gradreg {command}" in text, (page, command)
