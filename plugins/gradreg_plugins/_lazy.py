"""SciPy modules imported when a kernel first calls into them, not when the plugins load.

Importing scipy.special, scipy.linalg and scipy.sparse costs 0.2-0.3 s, which every command
would pay (`gradreg inspect` of a small graph among them) although few graphs use a special
function, a matrix decomposition or an image resampling matrix. ``LazyModule("scipy.special")``
stands for the module: an attribute read before the module is imported (a function stored in
a table at import time) gives a callable that imports it on its first call; once imported,
attributes are the module's own.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """A module imported on first use (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def load(self) -> ModuleType:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return self._module

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self._module is not None:
            return getattr(self._module, attr)
        return _LazyFunction(self, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (imported)' if self._module is not None else ''}>"


class _LazyFunction:
    """``module.attr``, looked up (and the module imported) on the first call."""

    __slots__ = ("_owner", "_attr", "_fn")

    def __init__(self, owner: LazyModule, attr: str) -> None:
        self._owner, self._attr = owner, attr
        self._fn: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fn = self._fn
        if fn is None:
            fn = self._fn = getattr(self._owner.load(), self._attr)
        return fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self._owner._name}.{self._attr}, imported on first call>"
