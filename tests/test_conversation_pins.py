"""Pinned chats (issue 27, the sidebar): a pin keeps a conversation first in `conversations()`
across a restart, leaves its date alone, and an unknown id is said as such. A real SQLite
database on the fake backend, through engine.api."""

from __future__ import annotations

import pytest

from engine.api import ConversationNotFound
from engine.storage import Database
from engine.storage import migrations
from tests.fake_backend import fakes, make_assistant  # noqa: F401


def test_a_pinned_chat_comes_first_keeps_its_date_and_survives_a_restart(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    old, middle, new = (a.new_conversation() for _ in range(3))
    assert [r["id"] for r in a.conversations()] == [new, middle, old]
    assert not any(r["pinned"] for r in a.conversations())
    before = {r["id"]: r["updated"] for r in a.conversations()}

    a.pin_conversation(old, True)
    rows = a.conversations()
    assert [(r["id"], r["pinned"]) for r in rows] == [(old, True), (new, False), (middle, False)]
    assert {r["id"]: r["updated"] for r in rows} == before  # pinning is not activity
    a.pin_conversation(middle, True)
    assert [r["id"] for r in a.conversations()] == [middle, old, new]  # pinned ones newest first too

    reopened = make_assistant(str(fakes.model_file("m")))  # a new Database on the same file
    assert [(r["id"], r["pinned"]) for r in reopened.conversations()] == [(middle, True), (old, True),
                                                                          (new, False)]
    reopened.pin_conversation(old, False)
    assert [r["id"] for r in reopened.conversations()] == [middle, new, old]
    assert reopened.conversations()[-1]["updated"] == before[old]


def test_pinning_an_unknown_chat_says_so(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    with pytest.raises(ConversationNotFound):
        a.pin_conversation(12345, True)


def test_chats_from_before_the_pin_column_read_as_unpinned(tmp_path, monkeypatch):
    names = [name for name, _ in migrations.MIGRATIONS]
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:names.index("0014_conversation_pinned")])
    db = Database(tmp_path / "a.db")
    cid = db.create_conversation(model="m", title="from before")
    db.close()
    monkeypatch.undo()
    db = Database(tmp_path / "a.db")
    try:
        assert "0014_conversation_pinned" in db.migrations_applied()
        assert db.conversation(cid)["pinned"] == 0 and db.conversation(cid)["title"] == "from before"
    finally:
        db.close()
