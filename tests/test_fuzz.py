"""The fuzzer in CI (issue 16): a short fixed-seed campaign on both backends, and property-based
tests (hypothesis) over the loader, the feed reader, the interpreter and gradients().

The oracle (tests/fuzz/oracle.py): a mutant may load, run and differentiate to values the backends
agree on (and equal to the unmutated graph's when the mutation keeps the meaning), or fail with a
GradregError whose one-line message names the file, a node or a tensor; never an internal error,
a traceback, a hang or a wrong value. The long run is a command:

    python -m tests.fuzz --minutes 30            # both backends, two workers
    python -m tests.fuzz --seed 16 --only 123    # replay one finding

GRADREG_FUZZ_COUNT changes how many mutants the CI campaign runs (default 300).
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from fuzz.campaign import FUZZ_ENV, run_campaign, seed_dtypes
from fuzz.mutate import endless_loop, make_mutant, mutate_bytes, mutate_text
from fuzz.oracle import Verdict, classify_error, evaluate
from fuzz.seeds import all_seeds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradreg as gr
from gradreg import config
from gradreg.errors import GradregError
from gradreg.formats.arrays import read_npy, read_npz
from gradreg.proto import graph_pb2

CI_SEED = 16
CI_COUNT = int(os.environ.get("GRADREG_FUZZ_COUNT", "300"))


def test_fixed_seed_campaign_on_both_backends():
    """Mutants through worker processes (a crash or a hang is caught), about 5% of them through
    `python -m gradreg` in a subprocess; every outcome must be a correct value or a clean error."""
    summary = run_campaign(CI_SEED, count=CI_COUNT, backends=("numpy", "numba"), seconds=20.0, jobs=2)
    print(summary.report())
    assert summary.executed == CI_COUNT
    assert not summary.failures, summary.report()
    for backend in ("numpy", "numba"):       # both backends ran mutants to a value, and to a clean error
        assert summary.per_backend[(backend, "ok")] > 20, summary.report()
        assert summary.per_backend[(backend, "error")] > 5, summary.report()
    kinds = {kind for kind, _ in summary.by_kind}
    assert kinds == {"graph", "feed", "cli"}, summary.report()


@pytest.fixture
def fuzz_limits(monkeypatch):
    """The low limits a fuzz worker runs with, in this process."""
    for name, value in FUZZ_ENV.items():
        attribute = name.removeprefix("GRADREG_").lower()
        if hasattr(config, attribute):
            monkeypatch.setattr(config, attribute, int(value))


SEEDS = all_seeds()
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _assert_clean(exc: BaseException, where: list[str]) -> None:
    kind, detail = classify_error(exc, where)
    assert kind == "error", f"{kind}: {detail}"


@SETTINGS
@given(index=st.integers(0, len(SEEDS) - 1), rng=st.randoms(use_true_random=False))
def test_structural_mutants_load_run_and_differentiate_cleanly(tmp_path, fuzz_limits, index, rng):
    seed, other = SEEDS[index], SEEDS[(index * 7 + 3) % len(SEEDS)]
    mutant = make_mutant(rng, seed, other, seed_dtypes(seed.name))
    path = tmp_path / f"mutant{mutant.suffix}"
    path.write_bytes(mutant.data)
    verdict = Verdict()
    evaluate(str(path), mutant, ["numpy"], None, verdict, 20.0)
    assert not verdict.failed, f"{verdict.kind} at {verdict.stage} [{seed.name}: {mutant.how}]: {verdict.detail}"


@SETTINGS
@given(index=st.integers(0, len(SEEDS) - 1), rng=st.randoms(use_true_random=False), text=st.booleans())
def test_byte_and_text_mutants_load_cleanly(tmp_path, fuzz_limits, index, rng, text):
    seed = SEEDS[index]
    if text and seed.text is not None:
        data, _ = mutate_text(rng, seed.text)
        path = tmp_path / "g.pbtxt"
    else:
        data, _ = mutate_bytes(rng, seed.binary, SEEDS[(index + 1) % len(SEEDS)].binary)
        path = tmp_path / "g.pb"
    path.write_bytes(data)
    try:
        graph = gr.load_graph(str(path))
    except GradregError as exc:
        _assert_clean(exc, [str(path)])
        return
    gr.save_graph(graph, str(tmp_path / "again.pb"))           # what loads can be written and read back
    assert len(gr.load_graph(str(tmp_path / "again.pb"))) == len(graph)


@SETTINGS
@given(data=st.binary(max_size=2048))
def test_arbitrary_bytes_as_a_graph(tmp_path, fuzz_limits, data):
    for name in ("g.pb", "g.pbtxt"):
        path = tmp_path / name
        path.write_bytes(data)
        try:
            gr.load_graph(str(path))
        except GradregError as exc:
            _assert_clean(exc, [str(path)])


def _npy(rng: random.Random) -> bytes:
    """A real .npy, then bytes flipped or cut."""
    import io

    import numpy as np
    buffer = io.BytesIO()
    np.save(buffer, np.arange(rng.randrange(1, 40)).astype(rng.choice(["<f4", "<i8", "|b1", "<c8"])))
    data = bytearray(buffer.getvalue())
    for _ in range(rng.randrange(1, 4)):
        if rng.random() < 0.3:
            del data[rng.randrange(len(data)):]
            if not data:
                break
        else:
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


@SETTINGS
@given(rng=st.randoms(use_true_random=False), garbage=st.binary(max_size=512))
def test_hostile_feed_files_are_arrays_or_feed_errors(tmp_path, fuzz_limits, rng, garbage):
    import zipfile
    npy = tmp_path / "x.npy"
    npy.write_bytes(_npy(rng))
    npz = tmp_path / "x.npz"
    with zipfile.ZipFile(npz, "w", compression=rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])) as archive:
        archive.writestr("x:0.npy", _npy(rng))
    raw = npz.read_bytes()
    cut = rng.randrange(len(raw))
    (tmp_path / "cut.npz").write_bytes(raw[:cut] + garbage + raw[cut + len(garbage):])
    for reader, path in ((read_npy, npy), (read_npz, npz), (read_npz, tmp_path / "cut.npz")):
        try:
            reader(str(path))
        except GradregError as exc:
            _assert_clean(exc, [str(path)])


def test_endless_loop_mutator_feeds_a_loopcond_left_with_no_inputs():
    # The 12-minute campaign once crashed its own runner here: an earlier mutation had emptied a
    # LoopCond's inputs, and the mutator indexed input[0].
    gd = graph_pb2.GraphDef()
    gd.node.add(name="cond", op="LoopCond")
    note = endless_loop(random.Random(0), gd, None)
    assert note == "LoopCond 'cond' fed True"
    assert list(gd.node[0].input) == ["cond_fuzztrue"]
    assert gd.node[1].name == "cond_fuzztrue" and gd.node[1].op == "Const" and not gd.node[1].input


# -- model files (issue 27): SavedModel and checkpoint directories, ONNX files with external data -----
def test_model_file_campaign():
    """Mutated model directories through every loader and command: each outcome a value or a clean
    error, and nothing outside the model read, written or deleted (the escape oracle)."""
    summary = run_campaign(CI_SEED, count=int(os.environ.get("GRADREG_FUZZ_MODELS", "60")), backends=("numpy",),
                           seconds=20.0, jobs=2, model_fraction=1.0)
    print(summary.report())
    assert not summary.failures, summary.report()
    kinds = {kind for kind, _ in summary.by_kind}
    assert kinds == {f"model:{k}" for k in ("saved_model", "tf_checkpoint", "npz_checkpoint", "onnx")}, summary.report()
    assert summary.verdicts["ok"] > 10 and summary.verdicts["error"] > 5, summary.report()


def test_the_escape_oracle_sees_an_escape(tmp_path, monkeypatch):
    """With the confinement turned off (everything granted), a SavedModel whose variables/ is a link
    to SENTINEL values outside is read through, and the oracle says so; confined, it is refused."""
    from fuzz.models import ModelJob, evaluate_model_job

    job = ModelJob("saved_model", "checkpoints/saved_module", ["directory_out"], [("directory_out", 0.5)])
    confined = Verdict()
    evaluate_model_job(job, str(tmp_path / "confined"), ["numpy"], confined, 60.0)
    assert confined.kind == "error" or not confined.failed, confined
    assert ("load", "error") in confined.stages, confined.stages
    monkeypatch.setattr(config, "allow_files", ["/"])
    opened = Verdict()
    evaluate_model_job(job, str(tmp_path / "opened"), ["numpy"], opened, 60.0)
    assert opened.kind == "escape", opened


@pytest.mark.parametrize("target", ["graphdef", "saved_model", "bundle", "checkpoint_state", "npz_checkpoint",
                                    "meta_graph", "onnx", "feeds"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=2048))
def test_every_loader_takes_any_bytes(target, data):
    """Each loader, on any bytes, returns or raises a GradregError (coverage-guided with atheris:
    `python -m tests.fuzz.loaders all -max_total_time=900`)."""
    from fuzz.loaders import TARGETS
    TARGETS[target](data)


def test_coverage_guided_fuzzing_of_the_loaders(tmp_path):
    """A small atheris budget over every loader in CI (skipped where atheris does not install); a
    crash leaves its input in tmp_path (replay: `python -m tests.fuzz.loaders any CRASH_FILE`)."""
    pytest.importorskip("atheris")
    import subprocess
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-m", "fuzz.loaders", "any", "-runs=1500", "-timeout=20"],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=tests, **FUZZ_ENV))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Done 1500 runs" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("finding", sorted(p.name for p in (Path(__file__).parent / "data" / "fuzz_findings").iterdir()
                                           if p.name != "README.md"))
def test_what_the_fuzzer_found_stays_fixed(finding):
    from fuzz.loaders import any_loader
    any_loader((Path(__file__).parent / "data" / "fuzz_findings" / finding).read_bytes())
