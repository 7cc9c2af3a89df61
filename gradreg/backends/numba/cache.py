"""The disk cache of generated kernels: each generated module is written under
:func:`cache_dir` in a file named by the hash of its content, imported from there, and
compiled by numba with ``cache=True`` — a second process finds both the file and numba's
compiled code (in __pycache__ beside it) and compiles nothing."""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

_loaded: dict[str, Any] = {}
_load_lock = threading.Lock()
_fallback_dir: list[Path] = []


def cache_dir() -> Path:
    """Where generated kernels (and numba's compiled code, in __pycache__) are kept:
    $GRADREG_CACHE_DIR, default ~/.cache/gradreg/numba."""
    configured = os.environ.get("GRADREG_CACHE_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "gradreg" / "numba"


def _writable_dir() -> Path:
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if os.access(directory, os.W_OK):
            return directory
    except OSError:
        pass
    # No usable cache directory: kernels still work, compiled again by each process.
    if not _fallback_dir:
        _fallback_dir.append(Path(tempfile.mkdtemp(prefix="gradreg-numba-")))
    return _fallback_dir[0]


def write_machine_code(path: Path, code: bytes) -> None:
    """Keep native kernels' machine code (gradreg.backends.native.engine) at ``path`` in the
    cache directory: written whole or not at all (a temporary file renamed into place). A
    cache that cannot be written is skipped: the next process compiles the kernel again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".o")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(code)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _write_once(path: Path, source: str) -> None:
    """Create ``path`` with ``source`` unless it already has it. An existing file is never
    rewritten with the same content: numba's cache index remembers the file's mtime."""
    try:
        if path.read_text() == source:
            return
    except (OSError, UnicodeDecodeError):
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def loaded_modules() -> list[Any]:
    """The generated modules this process has loaded (numba's statistics are on their functions)."""
    return list(_loaded.values())


def load_kernel(source: str) -> Any:
    """The numba dispatcher ``fused`` of the generated module ``source``."""
    return load_module(source).fused


def load_module(source: str) -> Any:
    """The module ``source``, imported from its file in the cache directory (written on
    first use, named by the hash of its content)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    module = _loaded.get(digest)
    if module is not None:
        return module
    with _load_lock:
        module = _loaded.get(digest)
        if module is None:
            path = _writable_dir() / f"fused_{digest}.py"
            _write_once(path, source)
            name = f"gradreg_fused_{digest}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load the generated kernel module {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            _loaded[digest] = module
    return module


def writable(a: Any) -> Any:
    """``a``, or a copy of it when it is a read-only array (a plan's constant: a frozen graph's
    weights, a Const's indices). A compiled loop is compiled for writable arrays; a read-only
    one is a type of its own to numba, and the loop would be compiled again for it at call
    time, in the caller's thread (about half a second, with the GIL). Pass a loop's small
    inputs (weights, indices) through this; the copy costs microseconds."""
    return a.copy() if type(a) is np.ndarray and not a.flags.writeable else a


def precompile(dispatcher: Any, specs: Any, readonly: Any = ()) -> None:
    """Compile the numba dispatcher for the arguments ``specs`` describe -- (NumPy dtype, ndim)
    each, ndim 0 for a scalar, arrays C-contiguous, read-only where ``readonly`` (a flag per
    argument) says -- now (from the disk cache when it has them), so that no call compiles
    later in the thread that runs the plan. A read-only array (a plan's constant) is a type of
    its own to numba: a loop compiled for writable ones is compiled again when given one, in
    the caller's thread, behind the background builder's compiler lock."""
    from numba import from_dtype, types
    flags = list(readonly) + [False] * (len(specs) - len(readonly))
    argtypes = tuple(from_dtype(np.dtype(dtype)) if ndim == 0 else
                     types.Array(from_dtype(np.dtype(dtype)), ndim, "C", readonly=frozen)
                     for (dtype, ndim), frozen in zip(specs, flags))
    dispatcher.compile(argtypes)
