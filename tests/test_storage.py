import sqlite3

from engine.storage import Database, decode_ids, encode_ids
from engine.storage.migrations import MIGRATIONS


def test_schema_migrations_recorded_and_wal(tmp_path):
    db = Database(tmp_path / "a.db")
    assert db.migrations_applied() == [name for name, _ in MIGRATIONS]
    db.close()
    # Re-opening applies nothing twice.
    db = Database(tmp_path / "a.db")
    assert db.migrations_applied() == [name for name, _ in MIGRATIONS]
    mode = sqlite3.connect(tmp_path / "a.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_messages_roundtrip_ids_and_title(tmp_path):
    db = Database(tmp_path / "a.db")
    cid = db.create_conversation(model="m", system_prompt="be brief")
    ids = [1, 2, 70000, 262143]
    mid = db.add_message(cid, "user", "Hello there " * 10, token_ids=ids, token_model="m:1")
    aid = db.add_message(cid, "assistant", "", token_ids=[], token_model="m:1", status="streaming")
    db.update_message(aid, content="partial", token_ids=[5, 6])
    rows = db.messages(cid)
    assert [r["id"] for r in rows] == [mid, aid]
    assert rows[0]["token_ids"] == ids and rows[0]["token_count"] == 4
    assert rows[1]["status"] == "streaming" and rows[1]["token_ids"] == [5, 6]
    db.update_message(aid, content="done text", token_ids=[5, 6, 7], logprobs=[-0.1, -0.2, -0.3],
                      status="done", stats={"finish_reason": "stop"})
    row = db.messages(cid)[1]
    assert row["status"] == "done" and row["stats"] == {"finish_reason": "stop"} and row["token_count"] == 3
    conv = db.conversation(cid)
    assert conv["title"] == ("Hello there " * 10).strip()[:60]
    assert db.integrity_check() == "ok"


def test_id_blob_is_little_endian_int32():
    assert encode_ids([1, 256]) == b"\x01\x00\x00\x00\x00\x01\x00\x00"
    assert decode_ids(encode_ids([3, 4])) == [3, 4]
    assert decode_ids(None) is None


def test_deleting_conversation_cascades(tmp_path):
    db = Database(tmp_path / "a.db")
    cid = db.create_conversation()
    db.add_message(cid, "user", "x")
    with db._conn:
        db._conn.execute("DELETE FROM conversations WHERE id = ?", (cid,))
    assert db.messages(cid) == []


def test_transaction_is_all_or_nothing(tmp_path):
    db = Database(tmp_path / "a.db")
    cid = db.create_conversation()
    try:
        with db.transaction() as conn:
            conn.execute("INSERT INTO messages (conversation_id, role, content, created) VALUES (?, 'user', 'a', 'now')",
                         (cid,))
            raise RuntimeError("fails half-way")
    except RuntimeError:
        pass
    assert db.messages(cid) == []
    db.add_message(cid, "user", "kept")
    assert [m["content"] for m in db.messages(cid)] == ["kept"]


def test_search_conversations_by_title_and_content(tmp_path):
    db = Database(tmp_path / "s.db")
    a = db.create_conversation(title="Trip planning")
    b = db.create_conversation()
    c = db.create_conversation()
    db.add_message(a, "user", "Where should we stay in Kyoto?")
    m = db.add_message(b, "assistant", "")
    db.update_message(m, content="The lighthouse keeper 守灯塔的人 wrote 100% of it_now")
    db.add_message(c, "user", "nothing here")
    assert db.search_conversations("LIGHTHOUSE") == [b]      # trigram FTS, case-insensitive
    assert db.search_conversations("守灯塔") == [b]          # Chinese substring, no word breaks
    assert db.search_conversations("灯塔") == [b]            # under 3 characters: LIKE
    assert db.search_conversations("trip") == [a]            # the title
    assert db.search_conversations("100%") == [b] and db.search_conversations("t_n") == [b]
    assert db.search_conversations('"quoted') == []
    assert set(db.search_conversations("")) == {a, b, c}
    db.delete_conversation(b)
    assert db.search_conversations("lighthouse") == []
    assert db.integrity_check() == "ok"


def test_reads_do_not_wait_for_a_write_on_another_thread(tmp_path):
    """A long write (a memory batch) holds the writer; listing and search read on their own
    connection and return meanwhile, seeing what was committed before it."""
    import threading

    db = Database(tmp_path / "r.db")
    cid = db.create_conversation(title="first")
    inside, release = threading.Event(), threading.Event()

    def long_write():
        with db.transaction() as conn:
            conn.execute("UPDATE conversations SET title = 'changed' WHERE id = ?", (cid,))
            inside.set()
            release.wait(120)  # longer than the reader is given: a read that waits for it cannot pass

    writer = threading.Thread(target=long_write)
    writer.start()
    try:
        assert inside.wait(60)
        got = {}
        reader = threading.Thread(target=lambda: got.update(rows=db.conversations(), hits=db.search_conversations("fir")))
        reader.start()
        reader.join(60)
        assert not reader.is_alive(), "a read waited for the writer"
        assert [r["title"] for r in got["rows"]] == ["first"] and got["hits"] == [cid]  # the committed state
    finally:
        release.set()
        writer.join()
    assert db.conversation(cid)["title"] == "changed"  # committed now: the next read sees it
    db.close()


def test_a_transaction_reads_its_own_writes(tmp_path):
    db = Database(tmp_path / "w.db")
    with db.transaction() as conn:
        conn.execute("INSERT INTO conversations (title, created, updated) VALUES ('t', 'x', 'x')")
        assert [r["title"] for r in db.conversations()] == ["t"]  # not yet committed, still seen here
    db.close()
