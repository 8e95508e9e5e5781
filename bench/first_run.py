"""From the first launch to the first answer on a downloaded model, through a local fake hub.

    .venv/bin/python bench/first_run.py [--throttle-mb-s 0] [--runs 3]

A fresh install each run: an empty data folder and a models folder holding only the bundled demo
model. This process prepares it and serves the recommended pair from tests/hub_server.HubServer on
127.0.0.1; a new process then launches the app (offscreen) and is timed from its first line: the
welcome checks the machine and recommends the pair, "Download and use" is pressed the moment it is
enabled (no human think time), the running engine switches tiers, one message is sent. The hub
serves the demo model's bytes under the recommended files' names (no real model can be fetched
here), so the download and the load are those of a 98 MB file: the table gives each step, so a real
model's share (its size over the link, its load) can be put in its place. `--throttle-mb-s` caps
the hub's speed (0: loopback).
"""

import time

T0 = time.perf_counter()  # the launch: before the app's first import (the interpreter's start excluded)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = ("window shown, welcome on screen", "machine checked, pair recommended", "pair downloaded, tiers set",
         "engine switched to the new tiers", "first token of the first answer", "first answer done")


def launch() -> dict:
    """The child: the app's first launch, each step's time since T0 (JSON on stdout)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QApplication, QWidget

    from app.main import create_main_window

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("assistant-first-run-bench")
    marks: list[float] = []

    def wait(predicate, timeout=600.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"step {len(marks) + 1} ({STEPS[len(marks)]}) took over {timeout:.0f} s")
            QCoreApplication.processEvents()
            time.sleep(0.002)
        marks.append(time.perf_counter() - T0)

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
        w.composer.send.emit("Hello! Who are you?", "auto")
        wait(lambda: bool(w.view.messages) and w.view.messages[-1].answer and bool(w.view.messages[-1].content))
        wait(lambda: not w.busy)
        return {"marks": marks, "model": w.last_done.model if w.last_done else "?"}
    finally:
        w.close()


def one_run(demo: Path, throttle: float | None) -> tuple[list[float], str, int]:
    """Prepare a fresh install and a hub with the recommended pair; time one launch in a child."""
    from engine.models.recommend import recommend_models
    from tests.hub_server import HubServer

    home = Path(tempfile.mkdtemp(prefix="bench-first-run-"))
    models = home / "models"
    models.mkdir()
    (models / demo.name).symlink_to(demo)
    env = dict(os.environ, ASSISTANT_HOME=str(home), ASSISTANT_MODELS_DIR=str(models),
               ASSISTANT_MODELS_HUB="huggingface")
    os.environ.update(env)  # the recommendation below sees the same (empty) models folder
    rec = recommend_models()
    picks = {p.entry.id: p.entry for p in (rec.l1, rec.l2) if p is not None}
    hub = HubServer({f"{e.repo_for('huggingface')}/{e.file}": demo for e in picks.values()},
                    throttle_bytes_per_s=throttle)
    try:
        env["ASSISTANT_HUB_HUGGINGFACE"] = hub.url
        child = subprocess.run([sys.executable, __file__, "--launch"], env=env, capture_output=True, text=True)
        if child.returncode != 0:
            raise RuntimeError(f"the launch failed:\n{child.stderr[-3000:]}")
        result = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        hub.stop()
    assert result["model"] in picks, f"the first answer came from {result['model']}, not the downloaded pair"
    return result["marks"], result["model"], demo.stat().st_size * len(picks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--throttle-mb-s", type=float, default=0.0, help="cap the hub's speed (0: loopback)")
    ap.add_argument("--runs", type=int, default=3, help="launches, each a new process on a fresh install")
    ap.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)  # the timed child
    args = ap.parse_args()
    if args.launch:
        print(json.dumps(launch()))
        return 0
    from tests.conftest import MODELS

    runs = []
    for _ in range(args.runs):
        marks, model, nbytes = one_run(MODELS["demo-small"], args.throttle_mb_s * 1e6 or None)
        runs.append(marks)
    med = [statistics.median(r[i] for r in runs) for i in range(len(STEPS))]
    link = f"{args.throttle_mb_s:g} MB/s" if args.throttle_mb_s else "loopback"
    print(f"\nFirst launch → first answer on a downloaded model ({link}, {nbytes / 1e6:.0f} MB fetched, "
          f"answered by {model}; median of {args.runs} launches)\n")
    print("| step | at (s) | step took (s) |")
    print("|---|---|---|")
    prev = 0.0
    for name, t in zip(STEPS, med):
        print(f"| {name} | {t:.2f} | {t - prev:.2f} |")
        prev = t
    return 0


if __name__ == "__main__":
    sys.exit(main())
