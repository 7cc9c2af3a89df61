"""Compiled kernels are kept on disk: a second process compiles nothing."""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gradreg.backends.numba import cache, codegen

pytest.importorskip("numba")

# Runs a graph with fused groups and a compiled Softmax, then reports numba's statistics
# for every dispatcher with code in the modules gradreg loaded from its cache directory
# (helpers called by a kernel are compiled with it: loaded from the cache, they have none).
SCRIPT = textwrap.dedent("""
    import json, time
    import numpy as np
    import gradreg as gr
    from gradreg.backends.numba import cache

    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float32, [None, 10], name="x")
        h = gr.sigmoid(gr.tanh(x * 0.5 + 1.0) - x)
        y = gr.apply_op("Softmax", h * 3.0)
    start = time.perf_counter()
    out = gr.Session(graph, backend="numba").run(y, {x: np.linspace(-3, 3, 50, dtype=np.float32).reshape(5, 10)})
    seconds = time.perf_counter() - start
    stats = []
    for module in cache.loaded_modules():
        for value in vars(module).values():
            if hasattr(value, "stats") and hasattr(value, "py_func") and value.signatures:
                stats.append({"cached": value.stats.cache_path is not None, "signatures": len(value.signatures),
                              "hits": sum(value.stats.cache_hits.values()),
                              "misses": sum(value.stats.cache_misses.values())})
    from gradreg.backends.native import engine
    print(json.dumps({"seconds": seconds, "stats": stats, "sum": float(out.sum()),
                      "native": [engine.compiled_count(), engine.loaded_count()]}))
""")


def run_process(cache_dir, native: str = "0") -> dict:
    env = dict(os.environ, GRADREG_CACHE_DIR=str(cache_dir), GRADREG_NATIVE=native)   # numba's cache, by default
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_process_loads_compiled_code(tmp_path):
    cold = run_process(tmp_path)
    warm = run_process(tmp_path)
    kernels = [s for s in cold["stats"] if s["cached"]]
    assert len(kernels) >= 2 and all(s["misses"] == s["signatures"] for s in kernels)
    # nothing compiled: every dispatcher with code got all of it from the disk cache
    assert [s for s in warm["stats"] if s["cached"]] == [dict(s, hits=s["misses"], misses=0) for s in kernels]
    assert all(s["cached"] for s in warm["stats"]), warm["stats"]
    assert warm["sum"] == cold["sum"]
    assert warm["seconds"] < cold["seconds"]
    sources = sorted(tmp_path.glob("fused_*.py"))
    assert sources and (tmp_path / "__pycache__").is_dir()
    for path in sources:   # named by the hash of their content
        digest = hashlib.sha256(path.read_text().encode()).hexdigest()[:24]
        assert path.name == f"fused_{digest}.py"


def test_second_process_loads_native_machine_code(tmp_path):
    """Native kernels (gradreg.backends.native) keep their machine code in native/ of the cache
    directory: a second process loads every kernel from there and optimizes nothing."""
    from gradreg.backends import native
    if not native.available():
        pytest.skip("native kernels are not available here")
    cold = run_process(tmp_path, native="1")
    warm = run_process(tmp_path, native="1")
    assert cold["stats"] == [] and warm["stats"] == []           # numba compiled nothing
    compiled, loaded = cold["native"]
    assert compiled >= 2 and loaded == 0                          # the fused chain and the Softmax loop
    assert warm["native"] == [compiled, compiled]                 # all of them from the disk cache
    assert len(list((tmp_path / "native").rglob("*.o"))) == compiled
    assert warm["sum"] == cold["sum"]


def test_unusable_cache_directory_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(blocker / "cache"))
    module = codegen.compile_module("@njit(cache=True)\ndef twice(x):\n    return x * {=2}\n", np.float32)
    assert module.twice(np.float32(1.5)) == 3.0
    assert not (blocker / "cache").exists()


def test_cache_directory_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADREG_CACHE_DIR", str(tmp_path))
    assert cache.cache_dir() == tmp_path
    monkeypatch.delenv("GRADREG_CACHE_DIR")
    assert cache.cache_dir().parts[-3:] == (".cache", "gradreg", "numba")


def test_generated_sources_change_when_the_math_library_does():
    """Numba's cache does not notice a change in a function a cached kernel calls: the math
    library's fingerprint is part of every generated source, hence of its file name."""
    mathlib_source = (pathlib.Path(codegen.__file__).with_name("mathlib.py")).read_bytes()
    fingerprint = hashlib.sha256(mathlib_source).hexdigest()[:16]
    assert fingerprint == codegen.MATHLIB_FINGERPRINT
    assert f"# math library {fingerprint}" in codegen.module_source("", ["exp_f32"])


def test_every_library_function_a_template_names_is_in_the_math_library():
    from gradreg.backends.numba import mathlib
    for f32, f64 in codegen.LIBRARY.values():
        for name in (f32, f64):
            if "." not in name:
                assert callable(getattr(mathlib, name)), name
