"""Safe file writes, the one way gradreg writes a file (graphs in every format, checkpoints and
their index, npz archives; any new writer should use it too): the file appears complete or not
at all, with the permissions a plain ``open(path, "wb")`` would have given it.

* The data goes to a temporary file beside the target, is flushed to disk and renamed over
  the target: a crash, a full disk or an exception mid-write leaves the old file as it was.
* A new file gets mode ``0o666 & ~umask`` (the temporary file is created with 0o666 and the
  kernel applies the umask, and the directory's default ACL where there is one). An existing
  file keeps its mode (less the set-user/group-id bits, which an ordinary write clears too) and,
  where the process may (root, or a group it belongs to), its owner and group.
* A symbolic link is followed: the file it points to is replaced, the link stays.
* Anything that is not a regular file — a directory, a device such as ``/dev/null``, a FIFO, a
  socket — is refused with :class:`~gradreg.errors.FileWriteError` before anything is created
  or opened (opening a FIFO would block).
* A hard-linked file is replaced under this one name: the other names keep the old content.
  That is what the rename costs; writing in place would keep the links but lose atomicity.
* While a write runs in the main thread, SIGTERM and SIGHUP remove the temporary file before
  the process ends as it would have (a handler installed only around the write, then the
  previous one restored; a Python handler that was installed is called as usual). Ctrl-C
  (KeyboardInterrupt) and every other exception remove it too.

    >>> atomic_write("model.pb", data)                        # bytes
    >>> atomic_write("arrays.npz", lambda f: np.savez(f, x=x))  # or a function writing to a file
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from gradreg.errors import FileWriteError

# Writes ``data`` to the (binary) temporary file it is given.
Writer = Callable[[IO[bytes]], Any]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
# Signals whose default action ends the process without Python noticing.
_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def atomic_write(path: str | os.PathLike[str], data: bytes | Writer) -> None:
    """Replace the regular file ``path`` (or create it) with ``data`` — bytes, or a function
    that writes to the binary file object it is given — atomically, with the permissions a
    plain write would give (see the module docstring).

    FileWriteError naming ``path`` if it is not a regular file, or if the write fails (no such
    directory, no permission, disk full); the previous file is then untouched.
    """
    atomic_write_all([(path, data)])


def atomic_write_all(files: Sequence[tuple[str | os.PathLike[str], bytes | Writer]]) -> None:
    """Write several files as :func:`atomic_write` writes one, for a set of files that belong
    together (a checkpoint's data shards and its index): every file is written to its temporary
    file first, and only when all of them are complete are they renamed into place, in the
    order given (readers should open the last one first). A failed write renames none of them.
    """
    targets = []
    for path, data in files:
        shown = os.fspath(path)
        target = os.path.realpath(shown)     # through symbolic links, as open() would write
        targets.append((shown, target, _existing_regular_file(shown, target), data))
    current = ""
    try:
        with contextlib.ExitStack() as stack:
            written = []
            for shown, target, existing, data in targets:
                current = shown
                tmp = stack.enter_context(_temporary_file(os.path.dirname(target), os.path.basename(target)))
                _fill(tmp, existing, data)
                written.append((shown, tmp, target))
            for shown, tmp, target in written:
                current = shown
                os.replace(tmp.path, target)
                tmp.renamed = True
    except OSError as exc:
        raise FileWriteError(f"{current}: cannot write: {exc.strerror or exc}") from None
    for directory in dict.fromkeys(os.path.dirname(target) for _, target, _, _ in targets):
        _sync_directory(directory)


def _fill(tmp: _Temporary, existing: os.stat_result | None, data: bytes | Writer) -> None:
    """Write ``data`` into the temporary file, with the old file's owner and mode; flushed to disk
    and closed."""
    if existing is not None:
        _adopt_owner_and_mode(tmp.file.fileno(), existing)
    if isinstance(data, (bytes, bytearray, memoryview)):
        tmp.file.write(data)
    else:
        data(tmp.file)
    tmp.file.flush()
    os.fsync(tmp.file.fileno())
    tmp.file.close()


def _existing_regular_file(shown: str, target: str) -> os.stat_result | None:
    """The status of the file at ``target``; None if there is none; FileWriteError if it is not
    a regular file."""
    try:
        status = os.stat(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FileWriteError(f"{shown}: cannot write: {exc.strerror or exc}") from None
    if not stat.S_ISREG(status.st_mode):
        kind = next((name for test, name in _KINDS if test(status.st_mode)), "not a regular file")
        where = shown if target == os.path.abspath(shown) else f"{shown} (-> {target})"
        raise FileWriteError(f"{where}: is {kind}; gradreg writes only regular files and leaves it as it is")
    return status


def _adopt_owner_and_mode(fd: int, existing: os.stat_result) -> None:
    """Give the new file the old one's owner and group (as far as this process may: root may
    set both, others only a group they belong to) and then its mode (chown clears set-id bits)."""
    if (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
        for uid in (existing.st_uid, -1):
            try:
                os.fchown(fd, uid, existing.st_gid)
                break
            except PermissionError:
                continue
    os.fchmod(fd, stat.S_IMODE(existing.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))


class _Temporary:
    """The temporary file of one write: its path, its open file, whether it was renamed into place."""

    def __init__(self, path: str, file: IO[bytes]):
        self.path = path
        self.file = file
        self.renamed = False


@contextlib.contextmanager
def _temporary_file(directory: str, base: str) -> Iterator[_Temporary]:
    """A new file beside the target, created with mode 0o666 so the kernel applies the umask
    (and a default ACL), removed unless it was renamed into place."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    with _removed_on_termination():
        for _ in range(100):
            path = os.path.join(directory, f".{base}.{os.urandom(4).hex()}.gradreg-tmp")
            try:
                fd = os.open(path, flags, 0o666)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free temporary name beside {base}")
        with _live_lock:
            _live_files.add(path)
        tmp = _Temporary(path, os.fdopen(fd, "wb"))
        try:
            yield tmp
        finally:
            tmp.file.close()
            with _live_lock:
                _live_files.discard(path)
            if not tmp.renamed:
                with contextlib.suppress(OSError):
                    os.unlink(path)


# -- termination signals ----------------------------------------------------------------------

_live_files: set[str] = set()     # temporary files being written, by any thread
# Reentrant: the signal handler runs in the main thread, possibly while that thread holds it.
_live_lock = threading.RLock()
_handler_depth = [0]               # nested writes in the main thread share one handler
_previous_handlers: dict[int, Any] = {}


@contextlib.contextmanager
def _removed_on_termination() -> Iterator[None]:
    """While the block runs in the main thread, a termination signal whose action was the
    default one removes the live temporary files before the process ends."""
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        if _handler_depth[0] == 0:
            _install_handlers()
        _handler_depth[0] += 1
    try:
        yield
    finally:
        if in_main:
            _handler_depth[0] -= 1
            if _handler_depth[0] == 0:
                _restore_handlers()


def _install_handlers() -> None:
    for signum in _TERMINATING:
        previous = signal.getsignal(signum)
        # An ignored signal stays ignored; a handler set outside Python (None) is left alone.
        if previous is signal.SIG_IGN or previous is None:
            continue
        _previous_handlers[signum] = previous
        signal.signal(signum, _on_termination)


def _restore_handlers() -> None:
    for signum, previous in list(_previous_handlers.items()):
        signal.signal(signum, previous)
        del _previous_handlers[signum]


def _on_termination(signum: int, frame: Any) -> None:
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        # The program's own handler decides; if it raises (SystemExit), the write's cleanup runs.
        previous(signum, frame)
        return
    with _live_lock:
        for tmp in list(_live_files):
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _live_files.clear()
    _restore_handlers()
    os.kill(os.getpid(), signum)      # end as the default action would (status: killed by signum)
    raise SystemExit(128 + signum)    # not reached when the signal's action ends the process


def _sync_directory(directory: str) -> None:
    """Make the rename itself durable (where directories can be opened and synced)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
