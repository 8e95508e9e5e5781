"""The keyboard (issue 27): Ctrl+N, Ctrl+K, Ctrl+L, Esc, Up in an empty message box,
Ctrl+Shift+C and Ctrl+/, pressed as a user presses them, on the window driven over the scripted
fake backend (the window is under test, not the model)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel

from app.chat_controller import Fork
from app.shortcuts import SHORTCUTS, ShortcutSheet, shown
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window



@pytest.fixture
def window(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m", decode_s_per_token=0.02))
    w = fake_window(qtbot, lambda: make_assistant(model), max_tokens=200, welcome_done=False)
    w.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is w, timeout=5_000)
    yield w
    w.close()


def press(qtbot, w, key, modifiers=Qt.NoModifier, target=None):
    qtbot.keyClick(target or w.view, key, modifiers)


def test_every_shortcut_does_what_the_sheet_says(qtbot, window, fakes):
    w, script = window, fakes.script("m")
    script.enqueue(Answer("Blue."))
    w.composer.edit.setPlainText("Name a colour.")
    qtbot.keyClick(w.composer.edit, Qt.Key_Return)
    qtbot.waitUntil(lambda: not w.busy, timeout=30_000)
    press(qtbot, w, Qt.Key_K, Qt.ControlModifier)
    assert w.search.hasFocus()
    press(qtbot, w, Qt.Key_L, Qt.ControlModifier, target=w.search)
    assert w.composer.edit.hasFocus()
    # Up in the empty box: the last message back, to edit; typed text keeps its arrow key
    qtbot.keyClick(w.composer.edit, Qt.Key_Up)
    assert w.chat.editing and w.composer.edit.toPlainText() == "Name a colour."
    w.chat.fork = Fork()
    w.composer.edit.setPlainText("")
    press(qtbot, w, Qt.Key_C, Qt.ControlModifier | Qt.ShiftModifier)
    assert QApplication.clipboard().text() == "Blue."
    # Esc stops an answer being written
    script.enqueue(Answer("la " * 60))
    w.composer.edit.setPlainText("Sing.")
    qtbot.keyClick(w.composer.edit, Qt.Key_Return)
    qtbot.waitUntil(lambda: bool(w.view.messages[-1].content), timeout=30_000)
    press(qtbot, w, Qt.Key_Escape)
    qtbot.waitUntil(lambda: not w.busy, timeout=10_000)
    assert w.last_done.stats["finish_reason"] == "cancelled"
    # Ctrl+N: a new, empty chat
    before = w.conversation_id
    press(qtbot, w, Qt.Key_N, Qt.ControlModifier)
    qtbot.waitUntil(lambda: w.conversation_id not in (None, before), timeout=10_000)
    assert w.view.messages == []
    # Ctrl+/: the sheet lists every shortcut as this platform writes it
    assert not w.findChildren(ShortcutSheet)
    press(qtbot, w, Qt.Key_Slash, Qt.ControlModifier)
    (sheet,) = w.findChildren(ShortcutSheet)
    assert sheet.isVisible()
    texts = {label.text() for label in sheet.findChildren(QLabel)}
    assert all(f"<b>{shown(keys)}</b>" in texts for keys, _, _ in SHORTCUTS)
