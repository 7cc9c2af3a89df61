"""gradreg's pytest plugin (entry point group ``pytest11``): one line gives a plugin package's test
suite the plugin checker (gradreg.testing.check_plugin)::

    pytest --gradreg-check gradreg-swish        # a distribution, top-level module or plugin name

adds one test per op type the package's gradreg plugins provide something for (an op definition,
kernels, a shape function, a gradient rule, a NotDifferentiable claim), named
``gradreg-check[plugin::OpType]``; a failing one lists each failed check with the op type, the
dtype, the input and the largest error. ``--gradreg-check-references`` chooses the runtimes
compared with where installed (default ``tensorflow,onnxruntime``; ``none``).

This module lives outside the ``gradreg`` package on purpose: pytest imports every ``pytest11``
plugin of the environment at start-up, before any conftest.py has set gradreg's environment
variables, and importing ``gradreg`` then would be both early and slow. gradreg is imported
only when ``--gradreg-check`` is given.
"""
from __future__ import annotations

from typing import Any

import pytest

DEFAULT_REFERENCES = "tensorflow,onnxruntime"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradreg", "gradreg plugin checks")
    group.addoption("--gradreg-check", action="append", default=[], metavar="PACKAGE",
                    help="check every op type the gradreg plugins of PACKAGE (a distribution, module or plugin "
                         "name) provide: kernels, shape functions, gradients against finite differences, "
                         "NotDifferentiable claims, GraphDef/ONNX round trips (repeatable)")
    group.addoption("--gradreg-check-references", default=DEFAULT_REFERENCES, metavar="NAMES",
                    help=f"runtimes to compare with where installed, comma-separated, or 'none' "
                         f"(default: {DEFAULT_REFERENCES})")


class CheckFailed(Exception):
    """A check item's failures (the OpReport of gradreg.testing)."""

    def __init__(self, report: Any):
        super().__init__(report.describe())
        self.report = report


class GradregCheckItem(pytest.Item):
    """The plugin checker's checks of one op type of one plugin."""

    def __init__(self, *, plugin: str, op_type: str, references: tuple[str, ...], **kwargs: Any):
        super().__init__(**kwargs)
        self.plugin = plugin
        self.op_type = op_type
        self.references = references

    def runtest(self) -> None:
        from gradreg.testing import check_op  # only when a check runs (see the module docstring)

        report = check_op(self.plugin, self.op_type, self.references)
        self.user_properties.append(("gradreg_check", report.describe()))
        if not report.ok:
            raise CheckFailed(report)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):
            return excinfo.value.report.describe()
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"gradreg-check {self.plugin}::{self.op_type}"


@pytest.hookimpl(tryfirst=True)   # before -k / -m deselect, so that they apply to these items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    packages = config.getoption("gradreg_check")
    if not packages:
        return
    from gradreg.errors import PluginError  # only with --gradreg-check (see the module docstring)
    from gradreg.testing import targets

    chosen = config.getoption("gradreg_check_references")
    references = () if chosen.strip().lower() == "none" else tuple(r.strip() for r in chosen.split(",") if r.strip())
    for package in packages:
        try:
            found = targets(package)
        except PluginError as exc:
            raise pytest.UsageError(f"--gradreg-check {package}: {exc}") from None
        for plugin, op_type in found:
            items.append(GradregCheckItem.from_parent(session, name=f"gradreg-check[{plugin}::{op_type}]",
                                                      plugin=plugin, op_type=op_type, references=references))
