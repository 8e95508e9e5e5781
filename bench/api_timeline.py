"""Where an API switch-back's time goes: our server's timeline from request to first token.

    .venv/bin/python bench/api_timeline.py [--rounds 8] [--root PATH]

Two stateless clients take turns as in bench/api_interleave.py (a ~1 000-token history each, one
short question a round, streamed, greedy). The server runs with marks on three engine calls, all
present since the API server exists: `KVTiers.prepare` (the model thread parks the other chat and
restores this one), `generate` (first chunk = prefill done, first token sampled) and its stats
(prompt tokens evaluated, prompt_ms). Marks are CLOCK_MONOTONIC, which the client process shares,
so each is timed from the moment the client sent the request. Rounds 2.. are switch-backs.

`--root` runs the server of another checkout (a worktree of an older commit): the
before/after of a reshape, side by side, with nothing else changed. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVE = """
import sys, time
out = open(sys.argv.pop(1), "a", buffering=1)
def mark(what):
    out.write(f"{time.clock_gettime(time.CLOCK_MONOTONIC):.6f} {what}\\n")
import engine.chat.targets as targets
import engine.kv.tiers as tiers
prepare = tiers.KVTiers.prepare
def timed_prepare(self, *a, **k):
    mark("restore_start"); r = prepare(self, *a, **k); mark("restore_end"); return r
tiers.KVTiers.prepare = timed_prepare
generate = targets.generate
def timed_generate(*a, **k):
    first = True
    for item in generate(*a, **k):
        if first:
            mark("first_chunk"); first = False
        if hasattr(item, "stats"):
            mark(f"prompt_ms={item.stats.prompt_ms}")
        yield item
targets.generate = timed_generate
from engine.cli.main import main
sys.argv[0] = "assistant"
sys.exit(main())
"""


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8, help="rounds per client; the first is the first visit")
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout whose server runs")
    ap.add_argument("--model", default="demo-small")
    args = ap.parse_args()
    root = args.root.resolve()
    sys.path[:0] = [str(root / "bench"), str(root)]
    import api_interleave as bench  # the same histories, questions and server settings
    from llama_cpp import Llama

    marks_file = Path(tempfile.mkstemp(prefix="api-timeline-", suffix=".txt")[1])
    serve = Path(tempfile.mkstemp(prefix="api-timeline-", suffix=".py")[1])
    serve.write_text(SERVE, encoding="utf-8")
    popen = bench.subprocess.Popen

    def marked(cmd, **kw):  # `assistant serve ...` -> python SERVE MARKS serve ...
        return popen([sys.executable, str(serve), str(marks_file), *cmd[1:]], **kw)

    bench.subprocess.Popen = marked
    path = bench.resolve_model(args.model).path
    bench.registry().load()
    vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
    count = lambda text: len(vocab.tokenize(text.encode(), add_bos=False, special=False))  # noqa: E731
    server = bench.start_ours(args.model, os.cpu_count() or 1, True, True)
    requests = []
    try:
        histories = [bench.seed_history(200 + i, count, 1000) for i in range(2)]
        with bench.httpx.Client() as http:
            for turn in range(args.rounds):
                for i, history in enumerate(histories):
                    history.append({"role": "user", "content": bench.question(i, turn)})
                    sent = now()
                    got = bench.stream_chat(http, server, history, 24)
                    history.append({"role": "assistant", "content": got["text"]})
                    if turn:
                        # stream_chat times with perf_counter: CLOCK_MONOTONIC on Linux as well
                        requests.append((sent, got["times"][0], got["times"][-1]))
    finally:
        server.stop()
    marks = [(float(t), what) for t, what in (line.split() for line in marks_file.read_text().splitlines())]
    marks_file.unlink()
    serve.unlink()
    rows: dict[str, list[float]] = {"restore starts": [], "restore ends": [], "first chunk": [], "client's first token": [],
                                    "prefill (prompt_ms)": []}
    for sent, first, last in requests:
        mine = [(t, w) for t, w in marks if sent <= t <= last + 1]
        at = lambda what: next((t - sent) * 1000 for t, w in mine if w == what)  # noqa: E731
        rows["restore starts"].append(at("restore_start"))
        rows["restore ends"].append(at("restore_end"))
        rows["first chunk"].append(at("first_chunk"))
        rows["client's first token"].append((first - sent) * 1000)
        rows["prefill (prompt_ms)"].append(next(float(w.split("=")[1]) for _, w in mine if w.startswith("prompt_ms=")))
    print(f"Switch-backs of 2 clients, {len(requests)} requests, server from {root}, {args.model}\n")
    print("| from the request sent | median ms | p25 | p75 |\n|---|---:|---:|---:|")
    for name, values in rows.items():
        q = statistics.quantiles(values, n=4)
        print(f"| {name} | {statistics.median(values):.1f} | {q[0]:.1f} | {q[2]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
