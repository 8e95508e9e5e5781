"""How long the GUI event loop stalls, in four phases, and how fast Stop frees the window.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/gui_latency.py [--model tiers] [--max-tokens 128]

A 10 ms QTimer on the GUI thread records the gap between its ticks; a gap above 10 ms is time the
loop could not run (target: never above 50 ms). Phases: typing into the composer (a character every
30 ms, each recounted exactly) while the L1 model loads; the first answer, typing on (with the default
two tiers it goes to L2, which loads then: the freeze this bench was written for); a ~1 500-token
paste counted and sent; Stop pressed during that kind of message's prefill (latency: Stop → idle).
Prints a markdown table per phase.
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

QUESTION = "Tell me about the history of tea, in detail."
SENTENCES = ["The river bends twice before it reaches the old mill.", "Tea was first traded along mountain roads.",
             "Every library keeps a few books that nobody has opened.", "A good map leaves out almost everything."]


def paste(seed: int, sentences: int = 150) -> str:
    """About 1 500 tokens of varied text and a question."""
    body = " ".join(SENTENCES[(seed + k * 3) % len(SENTENCES)] for k in range(sentences))
    return f"Paste {seed}: {body}\n\nWhat is this text about?"


def report(args, built_ms: float, stop_ms: float, late: list[str], phases: dict[str, list[float]]) -> None:
    print(f"window built and shown in {built_ms:.0f} ms (before the engine's first signal)")
    print(f"GUI event-loop gaps (10 ms timer), model {args.model}, answers of ≤ {args.max_tokens} tokens, "
          f"{os.cpu_count()} CPUs; Stop pressed {args.stop_after_s:.1f} s after sending → window idle in "
          f"{stop_ms:.0f} ms\n")
    for line in late:
        print(f"late tick: {line}")
    print("| phase | ticks | median ms | p99 ms | max ms | gaps > 50 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, gaps in phases.items():
        if not gaps:
            continue
        s = sorted(gaps)
        print(f"| {name} | {len(s)} | {statistics.median(s):.1f} | {s[int(len(s) * 0.99)]:.1f} | {s[-1]:.1f} | "
              f"{sum(g > 50 for g in s)} |")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--model", default="tiers", help="a model for both tiers, or 'tiers' for the settings' L1 + L2")
    p.add_argument("--stop-after-s", type=float, default=0.5, help="Stop this long after sending (in the prefill)")
    args = p.parse_args()
    app = QApplication([])
    names = ["typing while L1 loads", "first answer (L2 loads), typing", "1 500-token paste, sent",
             "Stop during its prefill"]
    phases: dict[str, list[float]] = {name: [] for name in names}
    state = {"phase": names[0], "last": None, "step": 0, "typed": 0, "stop_at": None, "stop_ms": None}

    late: list[str] = []  # each gap over 50 ms, with when it happened, to find its cause

    def tick():
        now = time.perf_counter()
        if state["last"] is not None:
            gap = (now - state["last"]) * 1000
            phases[state["phase"]].append(gap)
            if gap > 50:
                late.append(f"{gap:.0f} ms at {now - t0:.2f} s ({state['phase']}, busy={window.busy}, "
                            f"{len(window.view.messages)} bubbles)")
        state["last"] = now

    t0 = time.perf_counter()
    window = create_main_window(None if args.model == "tiers" else args.model, temperature=0.7,
                                max_tokens=args.max_tokens)
    window.show()
    built_ms = (time.perf_counter() - t0) * 1000  # GUI-thread work: fonts, styles, widgets
    probe = QTimer()
    probe.setInterval(10)
    probe.timeout.connect(tick)
    probe.start()
    composer = window.composer

    def type_a_character():
        if state["step"] <= 1:
            composer.edit.insertPlainText("Hello there, how are you today? "[state["typed"] % 32])
            state["typed"] += 1

    typist = QTimer()
    typist.setInterval(30)
    typist.timeout.connect(type_a_character)
    typist.start()

    def drive():
        step = state["step"]
        if step == 0 and window.engine_ready:
            state["phase"], state["step"] = names[1], 1
            window.send_message(QUESTION)
        elif step == 1 and not window.busy:
            typist.stop()
            state["phase"], state["step"] = names[2], 2
            composer.edit.setPlainText(paste(1))  # counted on the GUI thread, as a real paste is
            window.send_message(composer.edit.toPlainText())
        elif step == 2 and not window.busy:
            state["phase"], state["step"] = names[3], 3
            window.send_message(paste(2))
            QTimer.singleShot(int(args.stop_after_s * 1000), press_stop)
        elif step == 3 and state["stop_at"] is not None and not window.busy:
            state["stop_ms"] = (time.perf_counter() - state["stop_at"]) * 1000
            state["step"] = 4
            probe.stop()
            window.close()  # the engine saves its state and stops while the loop still runs
            app.quit()

    def press_stop():
        state["stop_at"] = time.perf_counter()
        window.stop()

    driver = QTimer()
    driver.setInterval(20)
    driver.timeout.connect(drive)
    driver.start()
    app.exec()
    report(args, built_ms, state["stop_ms"], late, phases)
    return finish(0)  # see app.main.finish: skip the interpreter's teardown of PySide6


if __name__ == "__main__":
    sys.exit(main())
