"""How long the GUI event loop stalls while the engine loads a model and streams answers.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/gui_latency.py [--turns 3] [--max-tokens 128]

A 10 ms QTimer on the GUI thread records the gap between its ticks; a gap above 10 ms is time the
loop could not run (target: never above 50 ms). Prints a markdown table per phase.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ASSISTANT_HOME", tempfile.mkdtemp(prefix="bench-gui-"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.main import create_main_window, finish  # noqa: E402

QUESTIONS = ["Tell me about the history of tea, in detail.", "Now explain how green and black tea differ.",
             "Write a short poem about a teapot."]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--model", default="demo-small")
    args = p.parse_args()
    app = QApplication([])
    phases: dict[str, list[float]] = {"load": [], "stream": []}
    state = {"phase": "load", "last": None, "turn": 0}

    def tick():
        now = time.perf_counter()
        if state["last"] is not None:
            phases[state["phase"]].append((now - state["last"]) * 1000)
        state["last"] = now

    t0 = time.perf_counter()
    window = create_main_window(args.model, temperature=0.7, max_tokens=args.max_tokens)
    window.show()
    built_ms = (time.perf_counter() - t0) * 1000  # GUI-thread work: fonts, styles, widgets
    probe = QTimer()
    probe.setInterval(10)
    probe.timeout.connect(tick)
    probe.start()

    def drive():
        if not window.engine_ready or window.busy:
            return
        if state["turn"] >= args.turns:
            probe.stop()
            window.close()  # the engine saves its state and stops while the loop still runs
            app.quit()
            return
        state["phase"] = "stream"
        window.send_message(QUESTIONS[state["turn"] % len(QUESTIONS)])
        state["turn"] += 1

    driver = QTimer()
    driver.setInterval(50)
    driver.timeout.connect(drive)
    driver.start()
    app.exec()
    print(f"window built and shown in {built_ms:.0f} ms (before the engine's first signal)")
    print(f"GUI event-loop gaps (10 ms timer), model {args.model}, {args.turns} turns of ≤ {args.max_tokens} tokens, "
          f"{os.cpu_count()} CPUs\n")
    print("| phase | ticks | median ms | p99 ms | max ms | gaps > 50 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, gaps in phases.items():
        if not gaps:
            continue
        s = sorted(gaps)
        print(f"| {name} | {len(s)} | {statistics.median(s):.1f} | {s[int(len(s) * 0.99)]:.1f} | {s[-1]:.1f} | "
              f"{sum(g > 50 for g in s)} |")
    return finish(0)  # see app.main.finish: skip the interpreter's teardown of PySide6


if __name__ == "__main__":
    sys.exit(main())
