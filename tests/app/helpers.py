"""Shared steps for the window tests."""

import os
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import Qt


def ready_window(qtbot, model: str | None, n_ctx: int, max_tokens: int, temperature: float = 0.0):
    """A shown MainWindow on a real engine (`model`: None = the settings' tiers), once the engine
    is ready; a banner instead (the model could not load) fails the test with its text."""
    from app.engine_worker import EngineWorker
    from app.main_window import MainWindow

    w = MainWindow(EngineWorker(model, n_ctx=n_ctx, memory=False), temperature=temperature, max_tokens=max_tokens)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_ready or w.banner.isVisible(), timeout=120_000)
    assert w.engine_ready, w.banner.text()
    return w


def fake_engine(make):
    """The window's engine worker on an Assistant that `make()` builds (on the scripted fake
    backend: tests/fake_backend.py), opened on the engine thread as the real one is."""
    from app.engine_worker import EngineWorker

    class FakeEngine(EngineWorker):
        def __init__(self):
            super().__init__(model="fake", memory=False)

        def open_assistant(self):
            return make()

    return FakeEngine()


def fake_window(qtbot, make, *, temperature: float = 0.0, max_tokens: int = 64, welcome_done: bool = True,
                worker=None, wait: bool = True):
    """A shown MainWindow on `fake_engine(make)` (or `worker`), once the engine is ready (`wait`);
    a banner instead fails the test with its text. `welcome_done`: the first-start welcome is
    dismissed first, as after a first run."""
    from app.main_window import MainWindow
    from engine.api import Settings

    if welcome_done:
        Settings.shared().set("ui.welcome_done", True)
    w = MainWindow(worker or fake_engine(make), temperature=temperature, max_tokens=max_tokens)
    qtbot.addWidget(w)
    w.show()
    if wait:
        qtbot.waitUntil(lambda: w.engine_ready or w.banner.isVisible(), timeout=30_000)
        assert w.engine_ready, w.banner.text()
    return w


def send(qtbot, w, text, timeout=120_000):
    """Type `text`, press Enter, wait for the answer; returns the window's `last_done`. Waits on
    window state, not on the worker's signals: those are emitted on the engine thread."""
    w.composer.edit.setPlainText(text)
    qtbot.keyClick(w.composer.edit, Qt.Key_Return)
    assert w.busy
    qtbot.waitUntil(lambda: not w.busy, timeout=timeout)
    return w.last_done


def screenshot_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ASSISTANT_SCREENSHOTS (docs/screenshots refreshes the docs' copies), else tmp."""
    out = Path(os.environ["ASSISTANT_SCREENSHOTS"]) if os.environ.get("ASSISTANT_SCREENSHOTS") else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


@contextmanager
def in_language(language: str):
    """The app's translator for `language` installed for the block ("en": none), with the bundled
    CJK font set up as the app has it."""
    from PySide6.QtWidgets import QApplication

    from app.i18n import install
    from app.main import setup_application

    app = QApplication.instance()
    setup_application(app)
    translator = install(app, language) if language != "en" else None
    try:
        yield
    finally:
        if translator is not None:
            app.removeTranslator(translator)
            app.removeTranslator(translator.qt)


def save_image(image, path: Path) -> None:
    """Write a QImage to `path`; QImage.save says only False when it cannot, so this raises: a
    screenshot the docs use must not silently stay the old one."""
    if not image.save(str(path)):
        raise OSError(f"could not write the screenshot {path} ({image.width()}×{image.height()}): "
                      "is the folder writable and the suffix an image format Qt writes?")


def save_screenshot(qtbot, widget, path: Path, width: int, height: int) -> None:
    widget.resize(width, height)
    widget.show()
    qtbot.wait(50)
    save_image(widget.grab().toImage(), path)
