"""Does the summary chain keep up under steady use? A long chat sent back to back, and after each
turn: which turns have left the window, which the summary covers, and whether the turn carried it.

    .venv/bin/python bench/summary_lag.py [--turns 40] [--model demo-small] [--n-ctx 2048]

Lag after a turn = user turns that have left the window but are in no summary yet (0: the window's
summary block covers everything the window dropped). Prints the per-turn series compactly and a
table: turns run, summaries written, turns that carried a summary once the window had moved, and
the lag's median and max over the turns after the window first moved.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ASSISTANT_HOME", tempfile.mkdtemp(prefix="bench-summary-"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.api import Assistant, GenerateParams, SamplingParams, TurnDone  # noqa: E402

TOPICS = ["tea", "rivers", "libraries", "maps", "trains", "bread", "bridges", "lighthouses", "clocks", "gardens"]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--model", default="demo-small")
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--max-tokens", type=int, default=96)
    args = p.parse_args()
    a = Assistant.from_settings(model=args.model, n_ctx=args.n_ctx, memory=False, cascade=False)
    params = GenerateParams(SamplingParams(temperature=0.0), max_tokens=args.max_tokens)
    rows = []
    t0 = time.perf_counter()
    try:
        cid = a.new_conversation()
        for t in range(args.turns):
            topic = TOPICS[t % len(TOPICS)]
            done = None
            for item in a.send(cid, f"Turn {t + 1}: tell me one fact about {topic}.", params):
                if isinstance(item, TurnDone):
                    done = item
            conv = a.conversation(cid)
            first = min(conv.first_kept.values(), default=0)
            left = [m for m in conv.messages[:first] if m.role == "user"]
            chain = a.db.summaries(cid)
            covered = chain[-1]["last_message_id"] if chain else 0
            lag = sum(1 for m in left if m.id > covered)
            rows.append({"turn": t + 1, "left": len(left), "lag": lag, "summaries": len(chain),
                         "summary_used": bool(done and done.stats.summary_used),
                         "ttft_ms": done.stats.ttft_ms if done else None})
        a.wait_for_summaries(120)
    finally:
        a.close()
    moved = [r for r in rows if r["left"] > 0]
    print(f"model {args.model}, n_ctx {args.n_ctx}, {args.turns} turns of ≤ {args.max_tokens} tokens back to back, "
          f"{time.perf_counter() - t0:.0f} s\n")
    print("turn:lag (left the window / lag / summary used): " + " ".join(
        f"{r['turn']}:{r['left']}/{r['lag']}{'*' if r['summary_used'] else ''}" for r in rows))
    print("\n| turns | summaries written | window first moved at turn | turns after that carrying a summary | "
          "lag median | lag max |")
    print("|---:|---:|---:|---:|---:|---:|")
    lags = [r["lag"] for r in moved] or [0]
    print(f"| {len(rows)} | {rows[-1]['summaries']} | {moved[0]['turn'] if moved else '—'} | "
          f"{sum(r['summary_used'] for r in moved)} / {len(moved)} | {statistics.median(lags):.0f} | {max(lags)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
