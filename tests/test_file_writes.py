"""Files gradreg writes: atomic, with the permissions a plain write would give (the umask for a
new file, the old mode and owner for an existing one), never replacing anything but a regular
file, and no temporary file left behind — not even when SIGTERM ends the process mid-write."""
from __future__ import annotations

import ast
import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradreg as gr
from gradreg.errors import FileWriteError, GraphFileError
from gradreg.formats.atomic import atomic_write
from gradreg.formats.npz import save_npz

ROOT = pathlib.Path(__file__).resolve().parent / "data" / "tf_corpus"


@pytest.fixture
def umask():
    """Set the process umask for one test (restored afterwards)."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda mask: os.umask(mask)
    os.umask(saved)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in pathlib.Path(directory).iterdir() if "gradreg-tmp" in p.name)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_0666_less_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    atomic_write(tmp_path / "new.bin", b"data")
    assert mode(tmp_path / "new.bin") == expected
    assert (tmp_path / "new.bin").read_bytes() == b"data"


@pytest.mark.parametrize("old_mode", [0o644, 0o600, 0o755, 0o640])
def test_an_existing_file_keeps_its_mode_whatever_the_umask(tmp_path, umask, old_mode):
    target = tmp_path / "old.bin"
    target.write_bytes(b"old")
    os.chmod(target, old_mode)
    umask(0o077)
    atomic_write(target, b"new")
    assert mode(target) == old_mode
    assert target.read_bytes() == b"new"


def test_set_id_bits_are_dropped_as_a_write_drops_them(tmp_path):
    target = tmp_path / "old.bin"
    target.write_bytes(b"old")
    os.chmod(target, 0o4755)
    atomic_write(target, b"new")
    assert mode(target) == 0o755


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root may give a file away")
def test_an_existing_file_keeps_its_owner_and_group(tmp_path):
    target = tmp_path / "owned.bin"
    target.write_bytes(b"old")
    os.chown(target, 12345, 23456)
    os.chmod(target, 0o640)
    atomic_write(target, b"new")
    status = os.stat(target)
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (12345, 23456, 0o640)


def test_dev_null_is_refused_and_left_untouched(tmp_path):
    before = os.stat("/dev/null")
    dev_listing = set(os.listdir("/dev"))
    with pytest.raises(FileWriteError, match=r"/dev/null: is a character device"):
        atomic_write("/dev/null", b"data")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert stat.S_IMODE(after.st_mode) == stat.S_IMODE(before.st_mode)
    assert set(os.listdir("/dev")) == dev_listing            # no temporary file was created there


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FileWriteError, match="pipe: is a FIFO"):   # opening it would block forever
        atomic_write(fifo, b"data")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert leftovers(tmp_path) == []


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(FileWriteError, match="d: is a directory"):
        gr.save_graph(gr.load_graph(str(ROOT / "cond_v1" / "forward.pb")), tmp_path / "d")
    assert (tmp_path / "d").is_dir()


def test_the_error_is_a_graph_file_error_too(tmp_path):
    with pytest.raises(GraphFileError, match="no-such-dir/x.pb: cannot write: No such file or directory"):
        atomic_write(tmp_path / "no-such-dir" / "x.pb", b"data")


def test_a_symbolic_link_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "real.bin"
    real.write_bytes(b"old")
    os.chmod(real, 0o604)
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    atomic_write(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new" and mode(real) == 0o604


def test_a_hard_link_is_replaced_under_this_name_only(tmp_path):
    # The documented cost of the rename: the other name keeps the old content.
    first = tmp_path / "a.bin"
    first.write_bytes(b"old")
    os.link(first, tmp_path / "b.bin")
    atomic_write(first, b"new")
    assert first.read_bytes() == b"new" and (tmp_path / "b.bin").read_bytes() == b"old"


def test_an_exception_in_the_writer_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "x.bin"
    target.write_bytes(b"old")

    def failing(f):
        f.write(b"half")
        raise RuntimeError("writer broke")
    with pytest.raises(RuntimeError, match="writer broke"):
        atomic_write(target, failing)
    assert target.read_bytes() == b"old" and leftovers(tmp_path) == []


def test_the_termination_handler_is_installed_only_around_the_write(tmp_path):
    seen = []

    def handler(signum, frame):
        seen.append(signum)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        during = []
        atomic_write(tmp_path / "x.bin", lambda f: during.append(signal.getsignal(signal.SIGTERM)))
        assert during[0] is not handler                    # gradreg's, around the write
        assert signal.getsignal(signal.SIGTERM) is handler  # the program's own, afterwards

        def signalled(f):
            f.write(b"data")
            os.kill(os.getpid(), signal.SIGTERM)           # the program's handler still runs
        atomic_write(tmp_path / "y.bin", signalled)
        assert seen == [signal.SIGTERM] and (tmp_path / "y.bin").read_bytes() == b"data"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_ignored_sigterm_stays_ignored_during_the_write(tmp_path):
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        during = []
        atomic_write(tmp_path / "x.bin", lambda f: during.append(signal.getsignal(signal.SIGTERM)))
        assert during == [signal.SIG_IGN]
    finally:
        signal.signal(signal.SIGTERM, previous)


SLOW_WRITER = textwrap.dedent("""
    import sys, time
    from gradreg.formats.atomic import atomic_write

    def slow(f):
        f.write(b"partial")
        f.flush()
        print("writing", flush=True)
        time.sleep(60)
    atomic_write(sys.argv[1], slow)
""")


@pytest.mark.parametrize("handler", ["default", "python"])
def test_sigterm_during_a_slow_write_leaves_no_temporary_file(tmp_path, handler):
    target = tmp_path / "model.pb"
    target.write_bytes(b"previous contents")
    script = SLOW_WRITER
    if handler == "python":   # a program whose own handler exits: the temporary file goes too
        script = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(3))\n" + script
    child = subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        assert len(leftovers(tmp_path)) == 1           # the write is under way
        child.send_signal(signal.SIGTERM)
        status = child.wait(timeout=30)
    finally:
        child.kill()
        child.stdout.close()
    assert status == (-signal.SIGTERM if handler == "default" else 3)
    assert leftovers(tmp_path) == []
    assert target.read_bytes() == b"previous contents"


# -- every writer of gradreg goes through it --------------------------------------------------------

def test_save_graph_respects_the_umask(tmp_path, umask):
    umask(0o027)
    graph = gr.load_graph(str(ROOT / "cond_v1" / "forward.pb"))
    gr.save_graph(graph, tmp_path / "g.pb")
    gr.save_graph(graph, tmp_path / "g.pbtxt")
    assert mode(tmp_path / "g.pb") == mode(tmp_path / "g.pbtxt") == 0o640


def test_checkpoints_and_their_index_respect_the_umask(tmp_path, umask):
    umask(0o022)
    g = gr.Graph()
    with g.as_default():
        v = gr.get_variable("file", [2], initializer=gr.ones_initializer())   # np.savez's parameter name
        init = gr.global_variables_initializer()
    sess = gr.Session(g)
    sess.run(init)
    path = gr.train.Saver([v]).save(sess, str(tmp_path / "model"))
    assert mode(path) == mode(tmp_path / "checkpoint") == 0o644
    np.testing.assert_array_equal(np.load(path)["file"], [1.0, 1.0])


def test_npz_archives_keep_any_key_and_respect_the_umask(tmp_path, umask):
    umask(0o077)
    save_npz(tmp_path / "a.npz", {"file": np.arange(3), "allow_pickle": np.float32(2.5), "x:0": np.eye(2)})
    with np.load(tmp_path / "a.npz") as archive:
        assert sorted(archive.files) == ["allow_pickle", "file", "x:0"]
        np.testing.assert_array_equal(archive["file"], np.arange(3))
        assert archive["allow_pickle"].dtype == np.float32 and archive["allow_pickle"] == 2.5
    assert mode(tmp_path / "a.npz") == 0o600


def test_the_command_line_writes_with_the_umask(tmp_path):
    out = tmp_path / "out.npz"
    model = pathlib.Path(__file__).resolve().parent.parent / "examples" / "mlp"
    done = subprocess.run(
        ["sh", "-c", f"umask 002 && {sys.executable} -m gradreg grad {model / 'model.pbtxt'} --ys loss "
                     f"--xs w1 --feed {model / 'inputs.npz'} -o {tmp_path / 'g.pb'} && "
                     f"{sys.executable} -m gradreg run {model / 'model.pbtxt'} --fetch loss "
                     f"--feed {model / 'inputs.npz'} -o {out}"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, GRADREG_BACKEND="numpy"))
    assert done.returncode == 0, done.stderr
    assert mode(tmp_path / "g.pb") == mode(out) == 0o664


# Modules allowed to create files themselves: the safe writer; the npz writer (it opens members of
# the zip archive it writes into atomic_write's file); the numba backend's cache of generated
# kernels (write-once files in a private directory, where numba's cache wants them; the native
# kernels' machine code beside them).
OWN_WRITERS = {"gradreg/formats/atomic.py", "gradreg/formats/npz.py", "gradreg/backends/numba/cache.py"}
_WRITING_CALLS = {"tofile", "write_bytes", "write_text", "mkstemp", "NamedTemporaryFile"}
# numpy's writers, as np.save(...): a method called save (Saver.save, which writes through
# atomic_write itself) is not one of them.
_NUMPY_WRITERS = {"save", "savez", "savez_compressed", "savetxt"}


def _writes_files(node: ast.Call) -> bool:
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name in _WRITING_CALLS:
        return True
    if name in _NUMPY_WRITERS:
        return isinstance(func, ast.Name) or (isinstance(func.value, ast.Name) and func.value.id in ("np", "numpy"))
    if name in ("open", "fdopen"):
        modes = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "mode"]
        return any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+")
                   for m in modes)
    return False


def test_the_writer_check_sees_writes():
    calls = {text: _writes_files(ast.parse(text).body[0].value) for text in (
        'open(p, "wb")', 'open(p, mode="a")', "open(p)", 'open(p, "rb")', "np.savez(f, x=1)", "p.write_text(s)",
        "numpy.save(p, x)", "savez_compressed(p, x=1)", "saver.save(session, p)")}
    assert calls == {'open(p, "wb")': True, 'open(p, mode="a")': True, "open(p)": False, 'open(p, "rb")': False,
                     "np.savez(f, x=1)": True, "p.write_text(s)": True, "numpy.save(p, x)": True,
                     "savez_compressed(p, x=1)": True, "saver.save(session, p)": False}


def test_every_writer_of_gradreg_goes_through_atomic_write():
    repo = pathlib.Path(__file__).resolve().parent.parent
    offenders = []
    for path in sorted((repo / "gradreg").rglob("*.py")) + sorted((repo / "plugins" / "gradreg_plugins").rglob("*.py")):
        where = str(path.relative_to(repo))
        if where in OWN_WRITERS or "/proto/" in where:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _writes_files(node):
                offenders.append(f"{where}:{node.lineno}")
    assert offenders == [], "write files with gradreg.formats.atomic.atomic_write (or npz.save_npz)"
