"""`assistant-gui` / `python -m app`: open the chat window on the configured (demo by default) models.

`create_main_window()` builds the window with the engine wired, not shown, inside whatever
QApplication the caller made (tests and automation use it)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys

from engine.api import Settings, install_dir

log = logging.getLogger("assistant.gui")
ASSETS = install_dir() / "assets"
CJK_FAMILY = "Noto Sans SC"


# The window's own packages: the `gui` extra of pyproject.toml, left out of a headless install.
GUI_MODULES = ("PySide6", "markdown_it", "pygments")
GUI_MISSING = ("error: the desktop window needs the gui extra, and {missing} is not installed here: "
               "run pip install -e '.[gui]' in the project folder (make venv installs it too). "
               "The terminal chat (assistant chat) and the local API server (assistant serve) run without it.\n")


def missing_gui_modules() -> list[str]:
    return [name for name in GUI_MODULES if importlib.util.find_spec(name) is None]


def has_display() -> bool:
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                or os.environ.get("QT_QPA_PLATFORM") in ("offscreen", "minimal", "vnc"))


def setup_application(app) -> None:
    """Once per QApplication: the bundled CJK font as fallback family, icon, translator, theme."""
    if getattr(app, "_assistant_ready", False):
        return
    from PySide6.QtGui import QFont, QFontDatabase, QIcon

    from app import gc_guard
    from app.i18n import install
    from app.theme import apply_theme

    gc_guard.install(app)  # cycles freed on the GUI thread, never a worker's

    for font in (ASSETS / "fonts").glob("*.ttf"):
        if QFontDatabase.addApplicationFont(str(font)) < 0:
            log.warning("could not load the font %s", font.name)
    base = app.font()
    families = [f for f in base.families() if f] or [base.family()]
    if CJK_FAMILY not in families:
        font = QFont(base)
        font.setFamilies(families + [CJK_FAMILY])  # Chinese falls back to the bundled font, never boxes
        app.setFont(font)
    app.setWindowIcon(QIcon(str(ASSETS / "icon.png")))
    settings = Settings.shared()
    app._assistant_translator = install(app, settings.get("ui.language"))
    apply_theme(settings.get("ui.theme"))
    app._assistant_ready = True


def create_main_window(model: str | None = None, worker=None, **kw):
    """The main window with its engine thread started (loading in the background), not shown."""
    from PySide6.QtWidgets import QApplication

    from app.engine_worker import EngineWorker
    from app.main_window import MainWindow

    app = QApplication.instance()
    if app is None:
        raise RuntimeError("create a QApplication first")
    setup_application(app)
    return MainWindow(worker or EngineWorker(model), **kw)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="assistant-gui", description="Offline chat assistant (desktop app).")
    p.add_argument("--model", help="one model for every local tier (catalog id or .gguf path)")
    p.add_argument("--debug", action="store_true")
    p.add_argument("--selftest", action="store_true",
                   help="headless check of an installed app: load the demo model, answer one prompt, check the "
                        "database and data dir, print a JSON report, exit 0 (ok) or 1")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if missing := missing_gui_modules():
        sys.stderr.write(GUI_MISSING.format(missing=", ".join(missing)))
        return 2
    if args.selftest:
        from app.selftest import run_selftest

        return finish(run_selftest(args.model))
    if not has_display():
        sys.stderr.write("error: no display found. On a headless machine run with QT_QPA_PLATFORM=offscreen, "
                         "or use the terminal chat: assistant chat\n")
        return 2
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Offline Assistant")
    window = create_main_window(args.model)
    window.show()
    code = app.exec()
    return finish(code)


def finish(code: int) -> int:
    """Leave without the interpreter's final garbage collection. Closing the window already
    saved everything (engine closed, database closed, KV state written); tearing down PySide6
    together with the engine's C extensions then aborted now and then with a refcount error on a
    bool (`bool_dealloc`) — a crash after the work is done, but an exit code of 134 and a core
    dump for the user. Flush what is buffered and exit directly."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
