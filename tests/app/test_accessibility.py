"""Accessibility (issue 27): walking the accessibility tree of the window and its panels finds no
unnamed interactive widget; the main window's controls also say what they do; Tab follows
reading order; a finished answer is announced politely. On the scripted fake backend: the window
is under test."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractSlider, QAbstractSpinBox, QComboBox,
                               QHeaderView, QLineEdit, QPlainTextEdit, QScrollBar, QTextEdit, QWidget)

from app import a11y
from engine.api import Settings
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window

INTERACTIVE = (QAbstractButton, QLineEdit, QPlainTextEdit, QTextEdit, QComboBox, QAbstractItemView,
               QAbstractSlider, QAbstractSpinBox)
PARTS = (QHeaderView, QScrollBar)  # parts of a list or a scroll area: read through it



@pytest.fixture
def window(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model))
    yield w
    w.close()


def controls(root: QWidget) -> list[QWidget]:
    """The interactive widgets a user can reach; a spin box's or combo box's own text field is
    read through its box (which must be named)."""
    return [w for w in [root, *root.findChildren(QWidget)]
            if isinstance(w, INTERACTIVE) and not isinstance(w, PARTS) and w.isVisibleTo(root)
            and not (isinstance(w, QLineEdit) and isinstance(w.parent(), (QAbstractSpinBox, QComboBox)))
            and w.objectName() != "qt_tableview_cornerbutton"]  # a table's select-all corner


def said(widget: QWidget, what) -> str:
    iface = QAccessible.queryAccessibleInterface(widget)
    return iface.text(what).strip() if iface is not None else ""


def unnamed(root: QWidget) -> list[str]:
    return [f"{type(w).__name__} {w.objectName()!r}" for w in controls(root) if not said(w, QAccessible.Name)]


def test_no_unnamed_control_and_the_main_ones_say_what_they_do(qtbot, window):
    w = window
    assert not unnamed(w)
    assert not [f"{type(c).__name__} {said(c, QAccessible.Name)!r}" for c in controls(w)
                if not said(c, QAccessible.Description)]
    from app.model_manager import ModelManagerDialog
    from app.settings_dialog import SettingsDialog
    from app.tool_approval import ApprovalDialog
    from app.welcome import WelcomePanel
    from engine.api import Approval

    panels = [w.open_tools(), w.open_documents(), w.show_shortcuts(), w.presets.open_dialog(),
              ApprovalDialog(Approval("bench", "add", {"a": 1, "b": 2}, "Add two integers."), lambda answer: None, w),
              SettingsDialog(Settings.shared(), w), ModelManagerDialog(Settings.shared(), w),
              WelcomePanel(Settings.shared(), w)]
    for panel in panels:
        panel.show()
        assert not unnamed(panel), type(panel).__name__
        if hasattr(panel, "close_work"):
            panel.close_work()  # the welcome's machine check runs on a thread of its own
        panel.close()


def test_tab_follows_reading_order(qtbot, window):
    w = window
    rail, bar = w.rail.buttons, w.top_bar
    order = [rail["chats"], rail["documents"], rail["tools"], rail["models"], rail["settings"],
             w.new_button, w.search, w.chat_list, bar.fold, w.composer.route, bar.preset, bar.presets_button,
             bar.toggle, w.view, w.composer.edit, w.composer.attach_button, w.docs_toggle.check, w.think_toggle,
             w.tools_toggle, w.composer.send_button]
    seen, widget = [], rail["chats"]
    for _ in range(200):
        if widget in order and widget not in seen:
            seen.append(widget)
        widget = widget.nextInFocusChain()
        if widget is rail["chats"]:
            break
    assert seen == order


def test_a_finished_answer_is_announced_politely(qtbot, window, fakes):
    w = window
    fakes.script("m").enqueue(Answer("Paris is the capital of France."))
    a11y.ANNOUNCED.clear()
    w.composer.edit.setPlainText("Capital of France?")
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy, timeout=30_000)
    assert ("chatView", "Polite", "Paris is the capital of France.") in a11y.ANNOUNCED
