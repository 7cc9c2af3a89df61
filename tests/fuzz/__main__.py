"""``python -m tests.fuzz``: a fuzz campaign against gradreg (see tests/fuzz/__init__.py).

    python -m tests.fuzz --minutes 30                 # the long run, both backends, two workers
    python -m tests.fuzz --count 400 --seed 7         # a fixed set of mutants
    python -m tests.fuzz --seed 7 --only 123,456      # replay findings
    python -m tests.fuzz --seed 7 --show 123          # what mutant 123 is
    python -m tests.fuzz --models --minutes 15        # model files only: SavedModels, checkpoints, ONNX
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .campaign import describe, generate, model_job, run_campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    parser.add_argument("--minutes", type=float, help="run for this long")
    parser.add_argument("--count", type=int, help="run this many mutants")
    parser.add_argument("--start", type=int, default=0, help="first mutant index")
    parser.add_argument("--only", help="comma-separated mutant indices to run")
    parser.add_argument("--show", type=int, help="describe one mutant and write its files to the current directory")
    parser.add_argument("--backends", default="numpy,numba")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds allowed per mutant (default 30)")
    parser.add_argument("--cli-fraction", type=float, default=0.05,
                        help="share of mutants run through `python -m gradreg` in a subprocess (default 0.05)")
    parser.add_argument("--model-fraction", type=float, default=0.2,
                        help="share of jobs that are model files: SavedModel and checkpoint directories, ONNX files "
                             "with external data (default 0.2)")
    parser.add_argument("--models", action="store_true", help="model-file jobs only (--model-fraction 1)")
    parser.add_argument("--json", metavar="FILE", help="write every result as JSON lines to FILE")
    args = parser.parse_args(argv)
    if args.models:
        args.model_fraction = 1.0
    if args.show is not None:
        return _show(args)
    if args.minutes is None and args.count is None and args.only is None:
        args.minutes = 5.0
    log = open(args.json, "w") if args.json else None  # noqa: SIM115 (closed below)
    last = [time.monotonic()]

    def progress(result, summary):
        if log is not None:
            log.write(json.dumps(result) + "\n")
        if result["verdict"] in ("ok", "error"):
            if time.monotonic() - last[0] > 30:
                last[0] = time.monotonic()
                print(f"... {summary.executed} mutants, {len(summary.failures)} failures", file=sys.stderr)
            return
        print(f"FAIL #{result['index']} {result['verdict']} at {result['stage']} [{result['seed']}: "
              f"{'; '.join(result['how'])[:200]}]: {result['detail'][:400]}", file=sys.stderr)

    only = [int(i) for i in args.only.split(",")] if args.only else None
    summary = run_campaign(args.seed, count=args.count, minutes=args.minutes, backends=tuple(args.backends.split(",")),
                           seconds=args.timeout, cli_fraction=args.cli_fraction, jobs=args.jobs, start=args.start,
                           progress=progress, only=only, model_fraction=args.model_fraction)
    if log is not None:
        log.close()
    print(summary.report())
    return 1 if summary.failures else 0


def _show(args) -> int:
    found = model_job(args.seed, args.show, args.model_fraction)
    if found is not None:
        from .models import build
        place = f"fuzz-{args.seed}-{args.show}"
        root = build(found, place)
        print(f"mutant {args.show} of campaign {args.seed}: {describe(args.seed, args.show, 0, args.model_fraction)}")
        print(f"wrote {place}/ (the model is {root})")
        return 0
    job = generate(args.seed, args.show, args.cli_fraction)
    print(f"mutant {args.show} of campaign {args.seed}: {job.kind} job on {job.seed.name}")
    for how in job.mutant.how:
        print(f"  {how}")
    name = f"fuzz-{args.seed}-{args.show}{job.mutant.suffix}"
    with open(name, "wb") as f:
        f.write(job.mutant.data)
    print(f"wrote {name}; feeds {sorted(job.mutant.feeds)}, fetches {job.mutant.fetches}, gradients {job.mutant.grad}")
    if job.mutant.feed_file is not None:
        feed = f"fuzz-{args.seed}-{args.show}-feed{job.mutant.feed_suffix}"
        with open(feed, "wb") as f:
            f.write(job.mutant.feed_file)
        print(f"wrote {feed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
