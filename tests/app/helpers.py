"""Shared steps for the window tests."""

from PySide6.QtCore import Qt


def send(qtbot, w, text, timeout=120_000):
    """Type `text`, press Enter, wait for the answer; returns the window's `last_done`. Waits on
    window state, not on the worker's signals: those are emitted on the engine thread."""
    w.composer.edit.setPlainText(text)
    qtbot.keyClick(w.composer.edit, Qt.Key_Return)
    assert w.busy
    qtbot.waitUntil(lambda: not w.busy, timeout=timeout)
    return w.last_done
