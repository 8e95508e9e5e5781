"""The chat list's groups (issue 27, the sidebar): Pinned, Today, Yesterday, Previous 7 days,
Previous 30 days and Older, counted in local calendar days; pin and unpin from the right-click
menu; a search hides the headers it empties; headers are never selected, by click or by keyboard.
The window is driven over the scripted fake backend, on a database written before it opens."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu

from app import sidebar
from app.chat_groups import group_of, grouped
from engine.api import db_path
from engine.storage import Database
from tests.fake_backend import fakes, make_assistant  # noqa: F401

from .helpers import fake_window

BEIJING = timezone(timedelta(hours=8))
AGES = {"Today chat": 0, "Yesterday chat": 1, "Week chat": 3, "Month chat": 20, "Old chat": 60}  # days


def utc(local: datetime) -> str:
    """A local time as the database stamps it (engine/storage/db.py `_now`)."""
    return local.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def test_day_boundaries_are_local_calendar_days():
    now = datetime(2024, 3, 10, 0, 1, tzinfo=BEIJING)  # a minute after midnight in Beijing
    at = lambda *args: utc(datetime(*args, tzinfo=BEIJING))  # noqa: E731
    cases = {
        at(2024, 3, 10, 0, 0, 30): "today",
        at(2024, 3, 9, 23, 59): "yesterday",     # two minutes ago, but before midnight
        at(2024, 3, 9, 0, 0): "yesterday",
        at(2024, 3, 8, 23, 59): "week",          # two days back
        at(2024, 3, 3, 0, 0): "week",            # seven days back
        at(2024, 3, 2, 23, 59): "month",         # eight
        at(2024, 2, 9, 12, 0): "month",          # thirty (2024 is a leap year)
        at(2024, 2, 8, 23, 59): "older",         # thirty-one
        at(2024, 3, 11, 9, 0): "today",          # a clock set back since: still the newest
        "2024-03-09T16:30:00.000+00:00": "today",  # 00:30 on the 10th in Beijing, the 9th in UTC
        "2024-03-09T15:30:00": "yesterday",      # no offset: read as UTC (23:30 on the 9th here)
    }
    assert {stamp: group_of(stamp, now) for stamp in cases} == cases
    # The same stamp and moment, counted in another time zone's days: 07:30 on the 10th in Beijing
    # is 23:30 on the 9th in UTC.
    morning = datetime(2024, 3, 10, 9, 0, tzinfo=BEIJING)
    assert group_of("2024-03-09T23:30:00.000+00:00", morning) == "today"
    assert group_of("2024-03-09T23:30:00.000+00:00", morning.astimezone(timezone.utc)) == "yesterday"


def test_pinned_chats_group_first_and_empty_groups_are_left_out():
    now = datetime(2024, 3, 10, 12, 0, tzinfo=BEIJING)
    rows = [{"id": 1, "updated": utc(now - timedelta(days=90)), "pinned": True},
            {"id": 2, "updated": utc(now), "pinned": False},
            {"id": 3, "updated": utc(now - timedelta(hours=1)), "pinned": False},
            {"id": 4, "updated": utc(now - timedelta(days=90)), "pinned": False}]
    assert [(g, [r["id"] for r in members]) for g, members in grouped(rows, now)] == \
        [("pinned", [1]), ("today", [2, 3]), ("older", [4])]
    assert grouped([], now) == []


def write_chats(now: datetime) -> dict[str, int]:
    """One chat per age in AGES, written before the window opens; their ids by title."""
    db = Database(db_path())
    ids = {title: db.create_conversation(model="m", title=title) for title in AGES}
    db.close()
    with sqlite3.connect(db_path()) as conn:  # `updated` as it would be after that many days
        conn.executemany("UPDATE conversations SET updated = ? WHERE id = ?",
                         [(utc(now - timedelta(days=AGES[t])), cid) for t, cid in ids.items()])
    conn.close()
    return ids


@pytest.fixture
def window(qtbot, fakes, make_assistant):
    now = datetime.now().astimezone()
    ids = write_chats(now)
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model))
    w.sidebar.now = lambda: now  # the same clock as the stamps: no midnight between them
    w.worker.refresh()
    qtbot.waitUntil(lambda: len(w.sidebar.chat_items()) == len(AGES), timeout=10_000)
    w.ids = ids
    yield w
    w.close()


def shown(w) -> list[str]:
    """The visible rows, headers in brackets."""
    items = (w.chat_list.item(i) for i in range(w.chat_list.count()))
    return [f"[{i.text()}]" if i.data(Qt.UserRole) is None else i.text() for i in items if not i.isHidden()]


ALL = ["[Today]", "Today chat", "[Yesterday]", "Yesterday chat", "[Previous 7 days]", "Week chat",
       "[Previous 30 days]", "Month chat", "[Older]", "Old chat"]


def menu_action(qtbot, w, title: str, monkeypatch, pick: str) -> list[str]:
    """Right-click the chat `title`, choose `pick` from its menu; the menu's entries."""
    seen = []

    class Chosen(QMenu):  # the menu as built, answered at once instead of shown modally
        def exec(self, *args):
            seen.extend(a.text() for a in self.actions() if not a.isSeparator())
            next(a for a in self.actions() if a.text() == pick).trigger()

    monkeypatch.setattr(sidebar, "QMenu", Chosen)
    item = next(i for i in w.sidebar.chat_items() if i.text() == title)
    w.chat_list.customContextMenuRequested.emit(w.chat_list.visualItemRect(item).center())
    return seen


def test_chats_sit_under_their_date_headers_and_headers_look_like_headers(qtbot, window):
    w = window
    assert shown(w) == ALL
    headers = [w.chat_list.item(i) for i in range(w.chat_list.count()) if w.chat_list.item(i).data(Qt.UserRole) is None]
    assert len(headers) == 5
    for header in headers:
        assert header.flags() == Qt.NoItemFlags and header.font().bold()
        assert header.data(Qt.AccessibleTextRole) == f"{header.text()}, a group of chats"
    assert all(i.icon().isNull() for i in w.sidebar.chat_items())  # nothing pinned yet


def test_pin_moves_a_chat_under_pinned_and_it_stays_there(qtbot, window, monkeypatch):
    w = window
    entries = menu_action(qtbot, w, "Old chat", monkeypatch, "Pin")
    assert entries[0] == "Pin" and "Unpin" not in entries
    expected = ["[Pinned]", "Old chat", *ALL[:-2]]  # Older is empty now: no header
    qtbot.waitUntil(lambda: shown(w) == expected, timeout=10_000)
    pinned = w.sidebar.chat_items()[0]
    assert pinned.text() == "Old chat" and not pinned.icon().isNull()  # the mark is an icon, not text
    # Read again from the engine, on its thread (a second SQLite library in this process must not
    # open the file while the engine's is on it: closing drops the process's POSIX locks).
    rows = []
    w.worker.call(lambda a: a.conversations(), rows.extend)
    qtbot.waitUntil(lambda: bool(rows), timeout=10_000)
    assert [(r["title"], r["pinned"]) for r in rows][:2] == [("Old chat", True), ("Today chat", False)]
    w.worker.refresh()
    qtbot.wait(200)
    qtbot.waitUntil(lambda: shown(w) == expected, timeout=10_000)
    assert menu_action(qtbot, w, "Old chat", monkeypatch, "Unpin")[0] == "Unpin"
    qtbot.waitUntil(lambda: shown(w) == ALL, timeout=10_000)  # back to its own date: a pin is not activity


def test_search_hides_the_headers_it_empties(qtbot, window):
    w = window
    w.search.setText("Week")
    qtbot.waitUntil(lambda: shown(w) == ["[Previous 7 days]", "Week chat"], timeout=10_000)
    w.search.setText("chat")
    qtbot.waitUntil(lambda: shown(w) == ALL, timeout=10_000)
    w.search.setText("nothing like this")
    qtbot.waitUntil(lambda: shown(w) == [], timeout=10_000)
    w.search.setText("")
    qtbot.waitUntil(lambda: shown(w) == ALL, timeout=10_000)


def test_headers_are_never_selected_by_click_or_keyboard(qtbot, window):
    w = window
    w.resize(1200, 900)  # every row on one page, for Page Up below
    chats = {i.text(): i for i in w.sidebar.chat_items()}
    w.chat_list.setCurrentItem(chats["Today chat"])
    qtbot.waitUntil(lambda: w.conversation_id == w.ids["Today chat"], timeout=10_000)
    header = next(w.chat_list.item(i) for i in range(w.chat_list.count()) if w.chat_list.item(i).text() == "Yesterday")
    qtbot.mouseClick(w.chat_list.viewport(), Qt.LeftButton, pos=w.chat_list.visualItemRect(header).center())
    assert w.chat_list.currentItem() is chats["Today chat"] and not header.isSelected()
    w.chat_list.setFocus()
    qtbot.keyClick(w.chat_list, Qt.Key_Down)  # over the "Yesterday" header
    assert w.chat_list.currentItem() is chats["Yesterday chat"]
    qtbot.waitUntil(lambda: w.conversation_id == w.ids["Yesterday chat"], timeout=10_000)
    qtbot.keyClick(w.chat_list, Qt.Key_Up)
    assert w.chat_list.currentItem() is chats["Today chat"]
    qtbot.keyClick(w.chat_list, Qt.Key_Up)  # only the "Today" header above: it stays
    assert w.chat_list.currentItem() is chats["Today chat"]
    qtbot.keyClick(w.chat_list, Qt.Key_End)
    assert w.chat_list.currentItem() is chats["Old chat"]
    qtbot.keyClick(w.chat_list, Qt.Key_Home)  # row 0 is the "Today" header: its first chat instead
    assert w.chat_list.currentItem() is chats["Today chat"]
    qtbot.keyClick(w.chat_list, Qt.Key_End)
    qtbot.keyClick(w.chat_list, Qt.Key_PageUp)  # the whole list is one page: to its top
    assert w.chat_list.currentItem() is chats["Today chat"]
    assert all(not h.isSelected() for h in map(w.chat_list.item, range(w.chat_list.count()))
               if h.data(Qt.UserRole) is None)
