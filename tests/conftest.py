"""Shared fixtures. Every Session in the suite checks kernel outputs against the graph's
dtypes and static shapes (GRADREG_CHECK_OUTPUTS=1), so a kernel returning float64 for a
float32 node fails the test that ran it. Sessions use the NumPy backend unless a test asks
for numba; numba kernels are built before a plan's first run (GRADREG_JIT=eager), so the
numba tests check the compiled kernels (tests/test_numba_jit.py covers background building)."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("GRADREG_CHECK_OUTPUTS", "1")
# Numba compiles each new kernel; only the numba tests (which ask for it) pay that cost.
os.environ.setdefault("GRADREG_BACKEND", "numpy")
os.environ.setdefault("GRADREG_JIT", "eager")

import pytest  # noqa: E402  (after the environment set-up above)

import gradreg  # noqa: E402  (after the environment set-up above)


@pytest.fixture
def graph():
    """A fresh graph, entered as the default graph for the test."""
    g = gradreg.Graph()
    with g.as_default():
        yield g


# Variables pytest sets per phase, and TensorFlow sets when it is first imported (by a test, or by
# gradreg.testing's reference checks): not gradreg's doing.
_SET_BY_IMPORTS = frozenset({
    "PYTEST_CURRENT_TEST", "ENABLE_RUNTIME_UPTIME_TELEMETRY", "HDF5_PLUGIN_PATH", "KMP_DUPLICATE_LIB_OK",
    "KMP_INIT_AT_FORK", "TF2_BEHAVIOR", "TF_CPP_MIN_LOG_LEVEL", "TPU_ML_PLATFORM", "TPU_ML_PLATFORM_VERSION",
    "TPU_SKIP_MDS_QUERY"})


def _process_settings() -> tuple:
    """The process-wide settings a test must leave as it found them (cheap to read: every test
    reads them twice): the environment, the working directory, BLAS's thread count, the
    handlers of the signals gradreg's writers catch, NumPy's error settings."""
    import signal

    import numpy as np

    from gradreg.backends import threads
    environment = {k: v for k, v in os.environ.items() if k not in _SET_BY_IMPORTS}
    return (environment, os.getcwd(), threads._the_blas().current(),
            {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)},
            np.geterr(), sys.getrecursionlimit())


def pytest_sessionstart(session):
    """gradreg's view of BLAS is taken once SciPy's own OpenBLAS is loaded too (gradreg's kernels
    load it when they first need SciPy): the manners check below reads both from the start."""
    import scipy.linalg  # noqa: F401

    from gradreg.backends import threads
    threads._the_blas()


@pytest.fixture(autouse=True)
def _leaves_the_process_as_it_found_it():
    """Manners, for the whole suite: a test (and so the gradreg calls it makes) leaves the
    process's settings as they were (monkeypatch's changes are undone before this looks)."""
    before = _process_settings()
    yield
    after = _process_settings()
    names = ["environment", "working directory", "BLAS threads", "signal handlers", "NumPy errors",
             "recursion limit"]
    changed = [name for name, a, b in zip(names, before, after) if a != b]
    if changed:
        diff = ""
        if before[0] != after[0]:
            keys = {k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k)}
            diff = f" (variables {sorted(keys)})"
        pytest.fail(f"the test changed the process's {', '.join(changed)}{diff}", pytrace=False)
