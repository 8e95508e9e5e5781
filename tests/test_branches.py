"""Branches: answering any message again, editing any message, sending after an earlier answer,
switching between the branches these leave, and deleting a turn. Through the real Assistant and
SQLite on scripted fake backends (tests/fake_backend.py), so token counts are exact."""

import sqlite3

import pytest

from engine.api import InputError
from engine.inference.events import GenerateParams
from engine.storage import Database
from engine.storage import migrations
from tests.fake_backend import Answer, dones, fakes, make_assistant, send  # noqa: F401


def path(a, cid) -> list[str]:
    return [m.content for m in a.conversation(cid).messages]


def shown(a, cid) -> list[str]:
    """What a front-end shows: the transcript's messages on the path."""
    return [m["content"] for m in a.transcript(cid) if not m["superseded"]]


def chat(fakes, make_assistant, answers: list[str], questions: tuple[str, ...], system: str = ""):
    """An Assistant whose model answers `answers` in turn, and a chat that asked `questions`."""
    a = make_assistant(str(fakes.model_file("m")))
    for text in answers:
        fakes.script("m").enqueue(Answer(text))
    cid = a.new_conversation(system)
    for q in questions:
        dones(send(a, cid, q))
    return a, fakes.backend("m"), cid


def ids(a, cid) -> list[int]:
    return [m.id for m in a.conversation(cid).messages]


def test_an_earlier_answer_given_again_starts_a_branch_and_switching_goes_back(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "A2", "B1"], ("q1", "q2"), system="Be brief.")
    u1, a1, u2, a2 = ids(a, cid)
    (again,) = dones(a.regenerate(cid, GenerateParams(max_tokens=16), message_id=a1))
    assert path(a, cid) == ["q1", "B1"] == shown(a, cid)
    rows = {m["id"]: m for m in a.transcript(cid)}
    assert rows[again.message_id]["branches"] == rows[a1]["branches"] == [a1, again.message_id]
    assert rows[again.message_id]["parent_id"] == u1
    assert all(rows[m]["superseded"] for m in (a1, u2, a2))

    back = a.switch_branch(cid, a1)  # the old branch, down to its newest message
    assert path(a, cid) == ["q1", "A1", "q2", "A2"] == shown(a, cid)
    assert back["path"] == [u1, a1, u2, a2] and back["shared"] == 1
    a.switch_branch(cid, again.message_id)
    assert path(a, cid) == ["q1", "B1"]
    # Both survive a restart: the path is stored.
    fresh = make_assistant(str(fakes.model_file("m")))
    assert [m.content for m in fresh.conversation(cid).messages] == ["q1", "B1"]


def test_switching_says_what_the_next_turn_reuses_and_it_does(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "A2 is longer than the first", "B2", "C"], ("q1", "q2"),
                        system="Be brief.")
    a2 = ids(a, cid)[-1]
    dones(a.regenerate(cid, GenerateParams(max_tokens=16)))  # B2: the KV state holds this path
    report = a.switch_branch(cid, a2)
    assert report["tokens"]["reused"] > 0 and report["tokens"]["read"] > 0
    (done,) = dones(send(a, cid, "q3"))
    assert done.stats.prompt_tokens_cached == report["tokens"]["reused"]
    # What it read: the branch's own tokens after the fork, then the new turn.
    assert done.stats.prompt_tokens_evaluated == len(fake.prompts[-1]) - report["tokens"]["reused"]
    assert done.stats.prompt_tokens_evaluated < len(fake.prompts[-1]) // 2


def test_any_message_can_be_edited_and_sent_again(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "A2", "E1"], ("q1", "q2"))
    u1 = ids(a, cid)[0]
    with pytest.raises(InputError, match="only a message you wrote"):
        list(a.resend_edited(cid, "x", GenerateParams(max_tokens=8), message_id=ids(a, cid)[1]))
    with pytest.raises(InputError, match="empty"):
        list(a.resend_edited(cid, "  ", GenerateParams(max_tokens=8), message_id=u1))
    assert path(a, cid) == ["q1", "A1", "q2", "A2"]  # a refused edit changes nothing
    dones(a.resend_edited(cid, "q1 edited", GenerateParams(max_tokens=8), message_id=u1))
    assert path(a, cid) == ["q1 edited", "E1"] == shown(a, cid)
    first = [m for m in a.transcript(cid) if m["parent_id"] is None]
    assert [m["content"] for m in first] == ["q1", "q1 edited"]
    assert first[1]["branches"] == [u1, first[1]["id"]]


def test_a_branch_from_an_earlier_answer_keeps_the_turns_after_it(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "A2", "X"], ("q1", "q2"))
    u1, a1, u2, a2 = ids(a, cid)
    with pytest.raises(InputError, match="after an answer"):
        list(a.send(cid, "x", GenerateParams(max_tokens=8), after=u1))
    (done,) = dones(a.send(cid, "other question", GenerateParams(max_tokens=8), after=a1))
    assert path(a, cid) == ["q1", "A1", "other question", "X"]
    rows = {m["id"]: m for m in a.transcript(cid)}
    new_user = ids(a, cid)[2]
    assert rows[new_user]["branches"] == [u2, new_user] and rows[new_user]["parent_id"] == a1
    a.switch_branch(cid, u2)
    assert path(a, cid) == ["q1", "A1", "q2", "A2"]


def test_a_message_not_on_the_path_is_refused(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "B1"], ("q1",))
    a1 = ids(a, cid)[1]
    dones(a.regenerate(cid, GenerateParams(max_tokens=8)))
    with pytest.raises(InputError, match="not on the chat's current path"):
        list(a.regenerate(cid, GenerateParams(max_tokens=8), message_id=a1))
    with pytest.raises(InputError, match="not in conversation"):
        a.switch_branch(cid, 10_000)


def test_deleting_a_turn_joins_the_turns_around_it(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "A2", "A3", "B2", "A4"], ("q1", "q2", "q3"))
    u1, a1, u2, a2, u3, a3 = ids(a, cid)
    dones(a.regenerate(cid, GenerateParams(max_tokens=8), message_id=a2))  # a branch under q2
    a.switch_branch(cid, a2)
    gone = a.delete_turn(cid, a2)  # the answer's turn: q2, A2 and the branch B2 under q2
    assert len(gone) == 3 and u2 in gone and a2 in gone
    assert path(a, cid) == ["q1", "A1", "q3", "A3"] == shown(a, cid)
    assert {m["id"]: m for m in a.transcript(cid)}[u3]["parent_id"] == a1
    (done,) = dones(send(a, cid, "q4"))  # the next turn reads the chat as it now is
    assert done.text == "A4" and path(a, cid)[-2:] == ["q4", "A4"]
    a.delete_turn(cid, u1)  # the first turn: q3 starts the chat now
    assert path(a, cid) == ["q3", "A3", "q4", "A4"]
    assert {m["id"]: m for m in a.transcript(cid)}[u3]["parent_id"] is None


def test_deleting_the_only_turn_on_a_path_shows_the_other_branch(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "E1"], ("q1",))
    dones(a.resend_edited(cid, "q1 edited", GenerateParams(max_tokens=8)))
    a.delete_turn(cid, ids(a, cid)[0])
    assert path(a, cid) == ["q1", "A1"]
    a.delete_turn(cid, ids(a, cid)[0])
    assert path(a, cid) == [] and a.transcript(cid) == []


def test_a_summary_made_on_another_branch_is_not_used(fakes, make_assistant):
    a, fake, cid = chat(fakes, make_assistant, ["A1", "A2", "B1"], ("q1", "q2"))
    u1, a1, u2, a2 = ids(a, cid)
    a.db.add_summary(cid, u1, a2, "they spoke of q1 and q2")
    assert [s["text"] for s in a.db.summaries(cid)] == ["they spoke of q1 and q2"]
    dones(a.regenerate(cid, GenerateParams(max_tokens=8), message_id=a1))
    assert a.db.summaries(cid) == []  # it speaks of q2, which this path does not have
    a.switch_branch(cid, a2)
    assert [s["text"] for s in a.db.summaries(cid)] == ["they spoke of q1 and q2"]


def test_chats_made_before_branches_get_their_tree(tmp_path, monkeypatch):
    """Migration 0015 gives earlier chats' rows their parents from the superseded marks they had:
    an answer given again and an edited message become siblings."""
    names = [name for name, _ in migrations.MIGRATIONS]
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:names.index("0015_message_tree")])
    db = Database(tmp_path / "old.db")
    cid = db.create_conversation()
    u1 = db.add_message(cid, "user", "q1")
    a1 = db.add_message(cid, "assistant", "A1")
    a1b = db.add_message(cid, "assistant", "A1 again")
    db.supersede(a1, a1b)
    a1c = db.add_message(cid, "assistant", "A1 once more")
    db.supersede(a1b, a1c)
    u2 = db.add_message(cid, "user", "q2")
    a2 = db.add_message(cid, "assistant", "A2")
    u2b = db.add_message(cid, "user", "q2 edited")
    db.supersede(u2, u2b)
    db.supersede(a2, u2b)
    a2b = db.add_message(cid, "assistant", "A2b")
    db.close()
    monkeypatch.undo()
    db = Database(tmp_path / "old.db")
    parents = {r["id"]: r["parent_id"] for r in db.messages(cid)}
    assert parents == {u1: None, a1: u1, a1b: u1, a1c: u1, u2: a1c, a2: u2, u2b: a1c, a2b: u2b}
    db.close()
    with pytest.raises(sqlite3.IntegrityError):  # the column is a real reference
        conn = sqlite3.connect(tmp_path / "old.db")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("UPDATE messages SET parent_id = 99999 WHERE id = ?", (a2b,))
        conn.commit()
