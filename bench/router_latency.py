"""Latency of `engine.routing.router.classify` on every prompt of the labelled TSVs, per language.

Run: `.venv/bin/python bench/router_latency.py [--reps 300]`. Prints a markdown table.

Each prompt is classified `--reps` times (after a warm-up, with the garbage collector off); a
prompt's latency is the median of its runs, so that a busy machine's scheduler hiccups do not
masquerade as slow rules. p50/p99/max are over prompts; "p99 all calls" is over every single call.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.routing.router import classify  # noqa: E402
from engine.routing.router_eval import EvalFileError, load_tsv, split_by_language  # noqa: E402

log = logging.getLogger("bench.router_latency")

DEFAULT_FILES = [ROOT / "tests/data/router_private.tsv", ROOT / "tests/data/router_holdout.tsv",
                 ROOT / "tests/data/router_public.tsv"]  # the public set (a copy of ../shared/eval/'s)


def _pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, min(len(sorted_values) - 1, int(round(q * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def time_prompts(prompts: list[str], reps: int) -> tuple[list[float], list[float]]:
    """Per-prompt median µs, and every call's µs."""
    medians, calls = [], []
    for p in prompts:
        for _ in range(10):
            classify(p)  # warm-up: caches, branch predictors
        runs = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            classify(p)
            runs.append((time.perf_counter_ns() - t0) / 1000.0)
        medians.append(statistics.median(runs))
        calls.extend(runs)
    return medians, calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=300, help="classifications per prompt")
    ap.add_argument("files", nargs="*", type=Path, help="labelled TSVs (default: private, holdout, public)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    examples = []
    for f in args.files or DEFAULT_FILES:
        if not f.is_file() and not args.files:
            log.warning("skipping %s (not present)", f)
            continue
        try:
            examples.extend(load_tsv(f))
        except EvalFileError as exc:
            log.error("%s", exc)
            return 2
    groups = split_by_language(examples)
    timed: dict[str, tuple[list[float], list[float]]] = {}
    gc.disable()  # the collector's pauses belong to the app, not to the rules
    try:
        for lang in ("zh", "en"):
            timed[lang] = time_prompts([e.prompt for e in groups[lang]], args.reps)
    finally:
        gc.enable()
    timed["all"] = (timed["zh"][0] + timed["en"][0], timed["zh"][1] + timed["en"][1])
    rows = []
    for lang, (medians, calls) in timed.items():
        if not medians:
            continue
        medians, calls = sorted(medians), sorted(calls)
        rows.append((lang, len(medians), _pct(medians, 0.5), _pct(medians, 0.99), medians[-1],
                     _pct(calls, 0.99)))
    print(f"classify() latency, µs ({args.reps} runs per prompt; per-prompt median)\n")
    print("| language | prompts | p50 | p99 | max | p99 all calls |")
    print("|---|---:|---:|---:|---:|---:|")
    for lang, n, p50, p99, mx, p99_all in rows:
        print(f"| {lang} | {n} | {p50:.1f} | {p99:.1f} | {mx:.1f} | {p99_all:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
