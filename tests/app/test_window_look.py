"""The window's look (issue 42): a long title never moves the layout; Documents and Tools are pages
of the main area (never frames over the chat) that Esc and the rail leave; the chat list folds
away; a row's "…" opens its menu; the answer's info icon shows the routing evidence the status
line no longer carries; every bundled icon draws, and every icon the app names is bundled."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, QTimer, QUrl
from PySide6.QtWidgets import QApplication, QToolTip

from app import icons
from app.sidebar import MORE_W
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, send

APP = Path(__file__).resolve().parents[2] / "app"


def geometry(w) -> list:
    return [w.width(), w.sidebar.width(), w.sidebar.x(), w.pages.width(), w.pages.x(), w.top_bar.preset.x()]


def test_a_long_title_never_moves_the_layout(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model))
    w.resize(1280, 800)
    qtbot.wait(50)
    before = geometry(w)
    title = "A very long chat title that goes on and on " * 8
    w.top_bar.set_title(title)
    w.sidebar.set_conversations([{"id": 1, "title": title, "updated": "2026-12-05 10:00:00", "pinned": False}], 1)
    qtbot.wait(50)
    assert geometry(w) == before
    assert w.top_bar.title.toolTip() == title  # elided on screen, whole in its tooltip
    w.close()


def test_documents_and_tools_are_pages_that_esc_and_the_rail_leave(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model))
    for key, opener in (("tools", w.open_tools), ("documents", w.open_documents)):
        page = opener()
        assert not page.isWindow() and w.pages.currentWidget() is page  # in the main area, not over the chat
        assert w.rail.buttons[key].isChecked() and not w.sidebar.isVisible()
        qtbot.keyClick(page, Qt.Key_Escape)
        assert w.pages.current_key() == "chats" and w.rail.buttons["chats"].isChecked()
        assert w.sidebar.isVisible()
    w.rail.buttons["tools"].click()
    assert w.pages.current_key() == "tools" and w.pages.currentWidget().isVisible()
    w.rail.buttons["chats"].click()
    assert w.pages.current_key() == "chats" and (w.view.isVisibleTo(w) or w.empty.isVisible())
    w.close()


def test_the_chat_list_folds_away_and_comes_back(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model))
    assert w.sidebar.isVisible()
    w.top_bar.fold.click()
    assert not w.sidebar.isVisible()
    w.toggle_sidebar()  # Ctrl+B
    assert w.sidebar.isVisible()
    w.close()


def test_a_rows_ellipsis_opens_its_menu_and_the_info_icon_shows_why_this_tier(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model))
    fakes.script("m").enqueue(Answer("Hello!"))
    done = send(qtbot, w, "Say hello")
    qtbot.waitUntil(lambda: bool(w.sidebar.chat_items()), timeout=10_000)
    item = w.sidebar.chat_items()[0]
    rect = w.chat_list.visualItemRect(item)
    seen = []

    def close_menu():  # the menu runs its own loop: read it, then close it
        menu = QApplication.activePopupWidget()
        seen.extend(a.text() for a in menu.actions() if a.text())
        menu.close()

    QTimer.singleShot(300, close_menu)
    with qtbot.waitSignal(w.chat_list.more, timeout=5_000):
        qtbot.mouseClick(w.chat_list.viewport(), Qt.LeftButton, pos=QPoint(rect.right() - MORE_W // 2, rect.center().y()))
    qtbot.waitUntil(lambda: bool(seen), timeout=5_000)
    assert {"Pin", "Rename…", "Delete…"} <= set(seen)
    assert "Say hello" in w.view.toPlainText() and "m" in w.view.toPlainText()  # the answer's header names its model
    assert done.route_reason not in w.status_label.text()
    w.view._on_link(QUrl("info:1"))
    assert done.route_reason in QToolTip.text() and "L1" in QToolTip.text()
    w.close()


def test_every_bundled_icon_draws_and_every_icon_named_is_bundled(qapp):
    bundled = {p.stem for p in icons.ICONS.glob("*.svg")}
    assert (icons.ICONS / "LICENSE-lucide.txt").is_file()
    for name in bundled:
        image = icons.pixmap(name, "#000000", 16, 2).toImage()
        assert (image.width(), image.height()) == (32, 32)
        assert any(image.pixelColor(x, y).alpha() for x in range(32) for y in range(32)), name  # not blank
    named = set()
    for source in APP.glob("*.py"):
        text = source.read_text(encoding="utf-8")
        named |= set(re.findall(r"""(?:use\([^,]+,|icon\(|chip\([^,]+,[^,]+,)\s*"([a-z0-9-]+)\"""", text))
        named |= set(re.findall(r"icon:([a-z0-9-]+)", text))
    from app.message_actions import ICONS

    named |= set(ICONS.values())
    assert named and named <= bundled, named - bundled
