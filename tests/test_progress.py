"""Logging and progress (issue 32, point 8): gradreg logs through the ``gradreg`` logger, which
the library never configures (a NullHandler); long loads and compiles are Tasks whose records
carry their progress; the ``gradreg`` command draws them as progress bars on a terminal only,
and not with --quiet."""
from __future__ import annotations

import io
import logging
import pathlib
import time

import pytest

import gradreg as gr
from gradreg import cli, cli_progress
from gradreg.progress import TaskState, get_logger, task

DATA = pathlib.Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def big_graph(tmp_path_factory) -> pathlib.Path:
    """A GraphDef big enough (1801 nodes) for its import to report its progress."""
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [4], name="x")
        for _ in range(600):
            x = gr.tanh(x + 0.5)
    path = tmp_path_factory.mktemp("big") / "chain.pb"
    gr.save_graph(graph, str(path))
    return path


def test_the_library_leaves_logging_to_the_application():
    with task("test", "anything"):    # logging is set up when the first task starts
        pass
    logger = logging.getLogger("gradreg")
    assert [type(h) for h in logger.handlers] == [logging.NullHandler]
    assert logger.level == logging.NOTSET and logger.propagate


def test_a_task_logs_its_start_progress_and_end(caplog, monkeypatch):
    monkeypatch.setattr("gradreg.progress.INTERVAL", 0.0)
    log = get_logger("test")
    with caplog.at_level(logging.DEBUG, logger="gradreg"), task(log, "counting", total=3, unit="things") as t:
        for _ in range(3):
            t.advance()
    records = [r for r in caplog.records if r.name == "gradreg.test"]
    assert [r.levelno for r in records] == [logging.INFO, logging.DEBUG, logging.DEBUG, logging.DEBUG, logging.INFO]
    assert records[0].getMessage() == "counting ..."
    assert records[-1].getMessage().startswith("counting: 3 things in ")
    state = records[-1].gradreg_task
    assert isinstance(state, TaskState) and state.finished and state.done == state.total == 3


def test_a_task_costs_nothing_when_nobody_listens(caplog):
    with caplog.at_level(logging.WARNING, logger="gradreg"), task(get_logger("test"), "quiet", 10) as t:
        t.advance(10)
    assert not [r for r in caplog.records if r.name.startswith("gradreg")] and not t.enabled


def test_loading_a_big_graph_and_an_onnx_model_report_their_progress(caplog, big_graph):
    with caplog.at_level(logging.INFO, logger="gradreg"):
        graph = gr.load_graph(str(big_graph))
        gr.load_graph(str(DATA / "onnx_models" / "mobilenetv2_opset18" / "model.onnx"))
    done = {r.getMessage().split(":")[0]: r.gradreg_task for r in caplog.records
            if getattr(r, "gradreg_task", None) is not None and r.gradreg_task.finished}
    imported = done[f"importing {big_graph} ({len(graph)} nodes)"]
    assert imported.done == imported.total == len(graph)
    onnx_import = next(state for what, state in done.items() if what.startswith("importing") and "model.onnx" in what)
    assert onnx_import.done == onnx_import.total > 100


def _slow_task(seconds: float) -> None:
    with task(get_logger("test"), "waiting", total=2, unit="steps") as t:
        t.advance()
        time.sleep(seconds)
        t.advance()


@pytest.mark.parametrize("use_tqdm", [True, False])
def test_the_handler_draws_a_task_only_once_it_runs_long(use_tqdm):
    if use_tqdm:
        pytest.importorskip("tqdm")
    logger = logging.getLogger("gradreg")
    stream = io.StringIO()
    handler = cli_progress.progress_handler(stream, delay=0.05, use_tqdm=use_tqdm)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        _slow_task(0.0)
        assert stream.getvalue() == ""            # quick: never shown
        _slow_task(0.3)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    text = stream.getvalue()
    assert "waiting" in text and ("2/2" in text or "done in" in text)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_the_command_shows_progress_on_a_terminal_unless_quiet(monkeypatch, capsys, quiet, big_graph):
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr(cli_progress, "DELAY", 0.0)
    argv = ["inspect", str(big_graph)] + (["--quiet"] if quiet else [])
    assert cli.main(argv) == 0
    shown = terminal.getvalue()
    assert ("importing" in shown) != quiet
    assert "nodes: 1801" in capsys.readouterr().out
    logger = logging.getLogger("gradreg")      # the command put the logger back as it was
    assert [type(h) for h in logger.handlers] == [logging.NullHandler] and logger.level == logging.NOTSET


def test_the_command_shows_nothing_when_stderr_is_not_a_terminal(monkeypatch, capsys, big_graph):
    monkeypatch.setattr(cli_progress, "DELAY", 0.0)
    assert cli.main(["inspect", str(big_graph)]) == 0
    assert capsys.readouterr().err == ""
