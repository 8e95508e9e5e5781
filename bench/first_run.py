"""From the first launch to the first answer on a downloaded model, through a local fake hub.

    .venv/bin/python bench/first_run.py [--throttle-mb-s 0] [--runs 1]

A fresh install each run: an empty data folder and a models folder holding only the bundled demo
model. The window opens (offscreen), the welcome checks the machine and recommends a pair; the
script presses "Download and use" the moment it is enabled (no human think time), the pair comes
from tests/hub_server.HubServer on 127.0.0.1, the running engine switches tiers, and one message is
sent. The hub serves the demo model's bytes under the recommended files' names (no real model can be
fetched here), so the download and the load are those of a 98 MB file: the table gives the steps,
so a real model's share (its size over the link, its load) can be put in its place.
`--throttle-mb-s` caps the hub's speed (0: loopback speed).
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
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = ("window shown, welcome on screen", "machine checked, pair recommended", "pair downloaded, tiers set",
         "engine switched to the new tiers", "first token of the first answer", "first answer done")


def fresh_install(demo: Path) -> Path:
    home = Path(tempfile.mkdtemp(prefix="bench-first-run-"))
    models = home / "models"
    models.mkdir()
    (models / demo.name).symlink_to(demo)
    os.environ["ASSISTANT_HOME"] = str(home)
    os.environ["ASSISTANT_MODELS_DIR"] = str(models)
    return home


def one_run(app, demo: Path, throttle: float | None) -> tuple[list[float], str, int]:
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QWidget

    from engine.api import Settings
    from engine.models.recommend import recommend_models
    from tests.hub_server import HubServer

    fresh_install(demo)
    rec = recommend_models()
    picks = [p.entry for p in (rec.l1, rec.l2) if p is not None]
    hub = HubServer({f"{e.repo_for('huggingface')}/{e.file}": demo for e in picks}, throttle_bytes_per_s=throttle)
    os.environ["ASSISTANT_HUB_HUGGINGFACE"] = hub.url
    os.environ["ASSISTANT_MODELS_HUB"] = "huggingface"
    marks: list[float] = []

    def wait(predicate, timeout=600.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"step {len(marks) + 1} ({STEPS[len(marks)]}) took over {timeout:.0f} s")
            QCoreApplication.processEvents()
            time.sleep(0.002)
        marks.append(time.perf_counter())

    t0 = time.perf_counter()
    from app.main import create_main_window

    w = create_main_window(None, temperature=0.0, max_tokens=32)
    w.show()
    try:
        panel = w.findChild(QWidget, "welcomePanel")
        assert panel is not None, "no welcome on a fresh install"
        wait(panel.isVisible)
        button = panel.findChild(QWidget, "downloadAndUse")
        wait(button.isEnabled)
        button.click()
        wait(panel.isHidden)
        wait(lambda: w.engine_ready and not w.busy and w.status_label.text() == "Settings applied")
        w.composer.edit.setPlainText("Hello! Who are you?")
        w.composer.send.emit(w.composer.edit.toPlainText(), "auto")
        wait(lambda: bool(w.view.messages) and w.view.messages[-1]["role"] == "assistant"
             and bool(w.view.messages[-1]["content"]))
        wait(lambda: not w.busy)
        model = (w.last_done or {}).get("model", "?")
        assert model in {e.id for e in picks}, f"the first answer came from {model}, not the downloaded pair"
        settings = Settings()
        assert settings.get("tier.L1") in {e.id for e in picks}
    finally:
        w.close()
        hub.stop()
    return [m - t0 for m in marks], model, sum(demo.stat().st_size for _ in {e.id for e in picks})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--throttle-mb-s", type=float, default=0.0, help="cap the hub's speed (0: loopback)")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    from PySide6.QtWidgets import QApplication

    from tests.conftest import MODELS

    demo = MODELS["demo-small"]
    app = QApplication.instance() or QApplication(sys.argv[:1])
    runs = []
    for _ in range(args.runs):
        marks, model, nbytes = one_run(app, demo, args.throttle_mb_s * 1e6 or None)
        runs.append(marks)
    med = [statistics.median(r[i] for r in runs) for i in range(len(STEPS))]
    link = f"{args.throttle_mb_s:g} MB/s" if args.throttle_mb_s else "loopback"
    print(f"\nFirst launch → first answer on a downloaded model ({link}, {nbytes / 1e6:.0f} MB fetched, "
          f"answered by {model}; median of {args.runs})\n")
    print("| step | at (s) | step took (s) |")
    print("|---|---|---|")
    prev = 0.0
    for name, t in zip(STEPS, med):
        print(f"| {name} | {t:.2f} | {t - prev:.2f} |")
        prev = t
    return 0


if __name__ == "__main__":
    sys.exit(main())
