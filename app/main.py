"""`assistant-gui` / `python -m app`: open the chat window on the configured (demo by default) models."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from engine.settings import Settings

log = logging.getLogger("assistant.gui")


def has_display() -> bool:
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                or os.environ.get("QT_QPA_PLATFORM") in ("offscreen", "minimal", "vnc"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="assistant-gui", description="Offline chat assistant (desktop app).")
    p.add_argument("--model", help="one model for every local tier (catalog id or .gguf path)")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not has_display():
        sys.stderr.write("error: no display found. On a headless machine run with QT_QPA_PLATFORM=offscreen, "
                         "or use the terminal chat: assistant chat\n")
        return 2
    from PySide6.QtWidgets import QApplication

    from app.engine_worker import EngineWorker
    from app.i18n import install
    from app.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Offline Assistant")
    settings = Settings()
    translator = install(app, settings.get("ui.language"))  # noqa: F841 - kept alive with the app
    from app.theme import apply_theme

    apply_theme(settings.get("ui.theme"))
    window = MainWindow(EngineWorker(args.model))
    window.show()
    return app.exec()
