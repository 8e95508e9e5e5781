"""The window against a long chat (issue 27's targets), side by side with a 20-message chat:

- opening it: from the click to the chat view painted with every message (target ≤ 300 ms);
- scrolling it: the time of each repaint while the scroll bar moves a page at a time (p99 ≤ 16 ms);
- the RSS it adds (≤ 50 MB);
- a message sent into it: drawing the new message and the empty answer under it;
- an answer streamed into it at 150 tokens/s: the GUI event loop's gaps, from a 1 ms timer
  (none > 16 ms).

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/window_long_chat.py [--messages 1000]

The chats are written straight into the database (Markdown answers with a code block every fifth);
the window runs on demo-small, which only loads: nothing is generated. Prints one markdown table.
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
os.environ["ASSISTANT_HOME"] = tempfile.mkdtemp(prefix="bench-window-")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.transcript import Answer  # noqa: E402
from engine.config.paths import db_path  # noqa: E402
from engine.storage import Database  # noqa: E402

ANSWER = ("Here is how it works, step by step.\n\n1. **Read** the input.\n2. *Check* each field.\n"
          "3. Write the result.\n\n| step | cost |\n|---|---:|\n| read | 2 ms |\n| check | 1 ms |\n")
CODE = "\n```python\ndef total(items):\n    return sum(i.price for i in items)\n```\n"


def write_chat(db: Database, n: int, title: str) -> int:
    cid = db.create_conversation(model="demo-small", title=title)
    for k in range(n // 2):
        db.add_message(cid, "user", f"Question {k}: how does step {k} work, and what does it cost?")
        db.add_message(cid, "assistant", ANSWER + (CODE if k % 5 == 0 else ""), model="demo-small", level="L1")
    return cid


def pump(app: QApplication, until, timeout_s: float = 60.0) -> None:
    """Run the real event loop until `until()` (asked every 2 ms). Not processEvents() in a Python
    loop: PySide6 6.12 on Python 3.11 drains None's refcount that way (millions of calls) and
    aborts with "none_dealloc"."""
    loop = QEventLoop()
    check = QTimer()
    check.setInterval(2)
    check.timeout.connect(lambda: loop.quit() if until() else None)
    check.start()
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    if not until():
        loop.exec()
    check.stop()
    if not until():
        raise TimeoutError("the window did not get there")


def measure(app, w, cid: int, n: int) -> dict:
    rss0 = psutil.Process().memory_info().rss
    clock = QElapsedTimer()
    clock.start()
    w._select(cid)
    pump(app, lambda: len(w.view.messages) >= n - 1)
    w.view.viewport().repaint()
    open_ms = clock.nsecsElapsed() / 1e6
    bar = w.view.verticalScrollBar()
    frames = []
    for value in range(bar.minimum(), bar.maximum() + 1, max(1, bar.pageStep())):
        bar.setValue(value)
        clock.restart()
        w.view.viewport().repaint()
        frames.append(clock.nsecsElapsed() / 1e6)
    rss = psutil.Process().memory_info().rss - rss0
    # stream: a token every 1/150 s into a new answer, a 1 ms timer watching the loop
    clock.restart()
    w.chat.transcript.add_user("One more question?")  # what a send draws on the GUI thread
    w.draw()
    w.view.viewport().repaint()
    send_ms = clock.nsecsElapsed() / 1e6
    gaps, last = [], [time.perf_counter()]

    def tick():
        now = time.perf_counter()
        gaps.append((now - last[0]) * 1000)
        last[0] = now

    ticker = QTimer()
    ticker.setInterval(1)
    ticker.timeout.connect(tick)
    feeder = QTimer()
    feeder.setInterval(7)  # ~150 tokens/s
    feeder.timeout.connect(lambda: w.chat.on_tokens(cid, "word "))
    ticker.start()
    feeder.start()
    t_end = time.monotonic() + 3.0
    pump(app, lambda: time.monotonic() > t_end)
    feeder.stop()
    ticker.stop()
    w.chat.transcript.finish(Answer(w.view.messages[-1].content, {}, "L1", "demo"))
    w.draw()
    frames.sort()
    return {"open": open_ms, "send": send_ms,
            "frame_p99": frames[int(len(frames) * 0.99)] if frames else 0.0,
            "frames": len(frames), "rss": rss / 2**20, "gap_max": max(gaps) if gaps else 0.0,
            "gaps_over_16": sum(g > 16 for g in gaps), "gap_median": statistics.median(gaps) if gaps else 0.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1000)
    args = ap.parse_args()
    db = Database(db_path())
    short = write_chat(db, 20, "short chat")
    long = write_chat(db, args.messages, "long chat")
    db.close()
    from engine.api import Settings

    Settings.shared().set("ui.welcome_done", True)
    app = QApplication.instance() or QApplication([])
    from app.main import create_main_window

    w = create_main_window("demo-small", temperature=0.0, max_tokens=16)
    w.resize(1100, 720)
    w.show()
    pump(app, lambda: w.engine_ready or w.engine_error is not None)
    rows = [("20 messages", measure(app, w, short, 20)), (f"{args.messages} messages", measure(app, w, long, args.messages))]
    print(f"The window against a long chat (offscreen, {os.cpu_count()} CPUs, 1100 × 720)\n")
    print("| chat | open to painted | scroll repaint p99 (frames) | RSS added | a message sent, drawn | "
          "streaming 150 tok/s: loop gap median / max | gaps > 16 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['open']:.0f} ms | {r['frame_p99']:.1f} ms ({r['frames']}) | {r['rss']:.1f} MB | "
              f"{r['send']:.1f} ms | {r['gap_median']:.1f} / {r['gap_max']:.1f} ms | {r['gaps_over_16']} |")
    base, big = rows[0][1], rows[1][1]
    print(f"\nratio, long / short: open {big['open'] / max(base['open'], 1e-9):.1f}×, "
          f"scroll p99 {big['frame_p99'] / max(base['frame_p99'], 1e-9):.1f}×, "
          f"max gap {big['gap_max'] / max(base['gap_max'], 1e-9):.1f}×")
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
