"""Where gradreg may read and write for a model file: the confinement of docs/security.md.

A model file is hostile until proven otherwise. What it names — a checkpoint prefix in a
SaveV2 node, a path in a ``checkpoint`` state file, an asset, ``variables/`` — is resolved and
checked before gradreg opens it:

* reads stay inside the model's root (the graph file itself, or the SavedModel or checkpoint
  directory) after every symbolic link is resolved; a file of the root that has other hard
  links is refused too (it may be another file of the machine under a name inside the root);
* writes go only under directories the caller granted, never where the file alone says;
* a relative path joins the model's directory, not the working directory.

The caller grants more with ``--allow-files DIR`` on the command line, ``Session(allow_files=
[...])``, ``gradreg.config.allow_files`` or the environment variable ``GRADREG_ALLOW_FILES``
(directories separated by ``os.pathsep``): reads and writes anywhere under those directories,
through links that stay inside them. Granting ``/`` turns the confinement off.

    >>> access = FileAccess(model="/models/m", granted=["/tmp/run"])
    >>> access.check("variables/variables.index", "read", "node 'restore' (op RestoreV2)")
    '/models/m/variables/variables.index'
    >>> access.check("/etc/passwd", "read", "node 'restore' (op RestoreV2)")
    Traceback (most recent call last):
    FileAccessError: node 'restore' (op RestoreV2) reads '/etc/passwd', outside the model '/models/m' ...
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence

from gradreg import config
from gradreg.errors import FileAccessError

VERBS = ("read", "write", "delete")
HOW_TO_GRANT = "grant a directory with --allow-files DIR, Session(allow_files=[...]) or GRADREG_ALLOW_FILES"


def real(path: str | os.PathLike[str]) -> str:
    """``path`` absolute, with every symbolic link resolved (the file need not exist)."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def is_inside(path: str, root: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or lies under it (both resolved already)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def no_nul(path: str | os.PathLike[str], what: str) -> None:
    """FileAccessError naming ``what`` if ``path`` holds a NUL character, which no file name may
    (the operating system's calls would raise ValueError)."""
    if "\0" in os.fspath(path):
        raise FileAccessError(f"{what} names a path holding a NUL character: {os.fspath(path)!r}; refused")


def resolve_inside(root: str | os.PathLike[str], path: str | os.PathLike[str], what: str) -> str:
    """``path`` (relative paths join ``root``) resolved through its links; FileAccessError naming
    ``what`` (the file and field that named it) if it leaves ``root``. For paths a model's own
    metadata names: a checkpoint state file's entries, a SavedModel's ``variables/``."""
    no_nul(path, what)
    base = real(root)
    joined = os.path.join(base, os.fspath(path))
    resolved = real(joined)
    if not is_inside(resolved, base):
        raise FileAccessError(f"{what} names '{os.fspath(path)}', which resolves to '{resolved}', outside "
                              f"'{base}' ({HOW_TO_GRANT})")
    return resolved


def check_file(path: str, what: str, single_link: bool = True) -> None:
    """Refuse to read ``path`` if it exists and is not a regular file (a FIFO would block the
    reader, a device never ends), or, with ``single_link``, if it has other hard links: under a
    name inside the model it may be any file of the machine (the hard-link bypass of onnx's
    external-data checks). A missing file is left to the reader to report in its own words."""
    no_nul(path, what)
    try:
        info = os.stat(path)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        return      # the reader says what it expected instead
    if not stat.S_ISREG(info.st_mode):
        raise FileAccessError(f"{what}: '{path}' is {_kind(info.st_mode)}, not a regular file; refused")
    if single_link and info.st_nlink > 1:
        raise FileAccessError(f"{what}: '{path}' has {info.st_nlink} hard links, so it may be a file outside the "
                              f"model under another name; refused ({HOW_TO_GRANT})")


def check_named_file(path: str, what: str) -> None:
    """Refuse a file the caller named that is a device (``/dev/zero`` or a link to one): reading it
    never ends. A FIFO is allowed (``gradreg inspect <(gunzip -c model.pb.gz)``)."""
    no_nul(path, what)
    try:
        info = os.stat(path)
    except OSError:
        return
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        raise FileAccessError(f"{what}: '{path}' is {_kind(info.st_mode)}, not a file; refused")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def granted_directories(extra: Iterable[str | os.PathLike[str]] = ()) -> tuple[str, ...]:
    """The directories the caller granted: ``gradreg.config.allow_files`` and ``extra``, resolved."""
    return tuple(dict.fromkeys(real(d) for d in (*config.allow_files, *extra)))


class FileAccess:
    """The files one graph's ops may touch: reads under ``model`` (the file or directory it came
    from; None for a graph built in Python) and under the ``granted`` directories, writes and
    deletions under the granted directories only. Relative paths join the model's directory
    (the working directory for a graph without one)."""

    def __init__(self, model: str | os.PathLike[str] | None = None, granted: Sequence[str | os.PathLike[str]] = ()):
        self.model = None if model is None else real(model)
        self.granted = granted_directories(granted)
        if self.model is None:
            self.base = os.getcwd()
        else:
            self.base = self.model if os.path.isdir(self.model) else os.path.dirname(self.model)

    def check(self, path: str | os.PathLike[str], verb: str, who: str) -> str:
        """The resolved path ``who`` (a node, as messages name it) may ``verb`` ("read", "write",
        "delete"); FileAccessError naming ``who``, the path and the roots otherwise."""
        raw = os.fspath(path)
        resolved = real(os.path.join(self.base, raw))
        if any(is_inside(resolved, root) for root in self.granted):
            if verb == "read":
                check_file(resolved, who, single_link=False)
            return resolved
        if verb == "read" and self.model is not None and is_inside(resolved, self.model):
            check_file(resolved, who)
            return resolved
        raise FileAccessError(f"{who} {_VERB_FORMS[verb]} '{raw}'{self._resolution(raw, resolved)}, outside "
                              f"{self._roots(verb)} ({HOW_TO_GRANT})")

    def _resolution(self, raw: str, resolved: str) -> str:
        return "" if resolved == raw else f" ('{resolved}')"

    def _roots(self, verb: str) -> str:
        granted = ", ".join(f"'{r}'" for r in self.granted)
        model = f"the model '{self.model}'" if verb == "read" and self.model is not None else ""
        if not granted:
            return model or "the directories granted to it (none is)"
        return f"{model} and the granted directories {granted}" if model else f"the granted directories {granted}"

    def reader(self, who: str) -> Callable[[str], str]:
        """``path -> resolved path`` for reads on behalf of ``who`` (a BundleReader's check)."""
        return lambda path: self.check(path, "read", who)

    def __repr__(self) -> str:
        return f"FileAccess(model={self.model!r}, granted={list(self.granted)!r})"


_VERB_FORMS = {"read": "reads", "write": "writes", "delete": "deletes"}
