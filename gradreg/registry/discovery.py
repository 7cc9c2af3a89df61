"""The entry points of installed distributions, found the way ``importlib.metadata`` finds them,
without importing it in the usual case.

Importing ``importlib.metadata`` (email, zipfile, csv, pathlib ...) and asking it for one group
costs 50-65 ms, a tenth of what ``gradreg inspect`` may take. Where sys.path holds only
directories and no import hook of its own finds distributions, the same answer comes from
reading each ``*.dist-info`` / ``*.egg-info`` directory's ``entry_points.txt``, in sys.path
order, the first distribution of a (normalized) name winning, as ``importlib.metadata`` does;
anywhere else (a zip or an egg on sys.path, a finder of its own that finds distributions; the
importlib_metadata backport's, which dask installs, is the standard one's twin) the work is
handed to ``importlib.metadata`` itself. tests/test_start_up.py checks the two agree.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import reduce
from typing import Any

from gradreg.errors import PluginError

# importlib.metadata's EntryPoint.pattern: ``module[.sub]:attribute[.sub] [extras]``.
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


@dataclass(frozen=True)
class EntryPoint:
    """One entry point, with the name and version of the distribution declaring it."""
    name: str
    value: str
    group: str
    distribution: str = ""
    version: str = ""

    def load(self) -> Any:
        """The object the entry point names (its module imported)."""
        match = _VALUE.match(self.value)
        if match is None:
            raise PluginError(f"entry point {self.name!r} of {self.distribution or 'a distribution'}: "
                              f"{self.value!r} is not module:attribute")
        module = importlib.import_module(match.group("module"))
        return reduce(getattr, filter(None, (match.group("attr") or "").split(".")), module)


def entry_points(group: str) -> list[EntryPoint]:
    """The entry points of ``group`` of every installed distribution (sys.path order)."""
    found = _scan(group)
    return found if found is not None else _from_importlib(group)


def _normalize(name: str) -> str:
    """A distribution name as importlib.metadata compares them (PEP 503, with underscores)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _scan(group: str) -> list[EntryPoint] | None:
    """The entry points read from the metadata directories on sys.path, or None when sys.path
    or the import hooks are such that only importlib.metadata can be trusted to find them."""
    from importlib.machinery import PathFinder
    if any(finder is not PathFinder and hasattr(finder, "find_distributions") and not _path_finder_alike(finder)
           for finder in sys.meta_path):
        return None
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for entry in sys.path:
        root = entry or "."
        if os.path.isfile(root) or root.lower().endswith(".egg"):
            return None          # zipped or egg distributions: importlib.metadata's own readers
        for info in _metadata_directories(root):
            key = _normalize(os.path.splitext(os.path.basename(info))[0].partition("-")[0])
            if key in seen:
                continue         # an earlier sys.path entry holds this distribution
            seen.add(key)
            found.extend(_read_entry_points(info, group))
    return found


def _path_finder_alike(finder: object) -> bool:
    """The importlib_metadata backport's finder, which importing dask (among others) puts on
    sys.meta_path: it finds the distributions on sys.path as the standard one does."""
    kind = type(finder)
    return kind.__module__.split(".")[0] == "importlib_metadata" and kind.__qualname__ == "MetadataPathFinder"


def _metadata_directories(root: str) -> Iterator[str]:
    try:
        children = os.listdir(root)
    except OSError:              # missing, not a directory, unreadable: nothing installed there
        return
    for child in children:
        if child.lower().endswith((".dist-info", ".egg-info")):
            yield os.path.join(root, child)


def _read_entry_points(info: str, group: str) -> list[EntryPoint]:
    try:
        with open(os.path.join(info, "entry_points.txt"), encoding="utf-8") as f:
            text = f.read()
    except OSError:              # no entry points (or an .egg-info that is a file)
        return []
    pairs: list[tuple[str, str]] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == group:
            name, equals, value = line.partition("=")
            if not equals:
                raise PluginError(f"{os.path.join(info, 'entry_points.txt')}: {line!r} in [{group}] is not "
                                  f"'name = module:attribute'")
            pairs.append((name.strip(), value.strip()))
    if not pairs:
        return []
    distribution, version = _name_and_version(info)
    return [EntryPoint(name, value, group, distribution, version) for name, value in pairs]


def _name_and_version(info: str) -> tuple[str, str]:
    """The Name and Version fields of a distribution's METADATA (PKG-INFO for an .egg-info):
    the header lines, read up to the first blank line."""
    fields: dict[str, str] = {}
    for filename in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(info, filename), encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        break
                    key, colon, value = line.partition(":")
                    if colon and key in ("Name", "Version"):
                        fields.setdefault(key, value.strip())
            break
        except OSError:
            continue
    return fields.get("Name", ""), fields.get("Version", "")


def _from_importlib(group: str) -> list[EntryPoint]:
    import importlib.metadata

    found = []
    described: dict[int, tuple[str, str]] = {}   # METADATA is parsed anew on each read: once per distribution
    try:
        listed = importlib.metadata.entry_points(group=group)
    except Exception as exc:    # a malformed entry_points.txt somewhere on sys.path
        raise PluginError(f"cannot read the installed distributions' entry points: {type(exc).__name__}: {exc}") \
            from exc
    for ep in listed:
        dist = getattr(ep, "dist", None)
        if id(dist) not in described:
            metadata = getattr(dist, "metadata", None) if dist is not None else None
            described[id(dist)] = ((metadata["Name"] or "", metadata["Version"] or "") if metadata is not None
                                   else ("", ""))
        found.append(EntryPoint(ep.name, ep.value, group, *described[id(dist)]))
    return found
