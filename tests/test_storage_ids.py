"""Ids are never handed out twice: a queued job, a KV file named by conversation id or a memory
chunk naming a deleted message must never come to point at a newer row. And the migration that
brought this to existing databases keeps every row, link, index, trigger and search entry."""

import sqlite3

import numpy as np
import pytest

import engine.storage.migrations as migrations
from engine.memory.store import MemoryStore
from engine.storage import Database

DIM = 16
ID_TABLES = ("conversations", "messages", "summaries", "memories")
BEFORE = [name for name, _ in migrations.MIGRATIONS].index("0007_message_search") + 1


def test_deleting_the_newest_rows_never_gives_their_ids_again(tmp_path):
    db = Database(tmp_path / "a.db")
    store = MemoryStore(db, "m", DIM, vector_backend="numpy")
    db.create_conversation()
    cid = db.create_conversation()
    mid = db.add_message(cid, "user", "hello")
    sid = db.add_summary(cid, mid, mid, "a greeting")
    (memory_id,) = store.insert("message", ["hello"], conversation_id=cid, message_id=mid)
    store.delete([memory_id])
    db.delete_conversation(cid)

    cid2 = db.create_conversation()
    mid2 = db.add_message(cid2, "user", "hi again")
    sid2 = db.add_summary(cid2, mid2, mid2, "another greeting")
    (memory_id2,) = store.insert("note", ["a fact"])
    assert cid2 > cid and mid2 > mid and sid2 > sid and memory_id2 > memory_id
    db.close()


def dump(conn, table, columns=None):
    return conn.execute(f"SELECT {', '.join(columns) if columns else '*'} FROM {table} ORDER BY rowid").fetchall()


def columns(conn, table):
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def schema_objects(conn):
    return sorted(conn.execute("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite%'"))


def table_sql(conn, table):
    return conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]


@pytest.fixture(params=["sqlean", "sqlite3"])  # SQLite 3.50 with sqlite-vec, and the system's
def old_database(request, tmp_path, monkeypatch):
    """A database at 0007 (before AUTOINCREMENT) with conversations, a superseded answer, a summary
    chain, memories with vectors, and its newest conversation deleted (the ids a reuse would give)."""
    path = tmp_path / "old.db"
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:BEFORE])
        db = Database(path, driver=request.param)
        store = MemoryStore(db, "m", DIM)
        convs = []
        for c in range(3):
            cid = db.create_conversation(model="m", system_prompt=f"system {c}")
            user = db.add_message(cid, "user", f"question {c} about the harbour", token_ids=[1, 2, c])
            weak = db.add_message(cid, "assistant", f"weak answer {c}")
            good = db.add_message(cid, "assistant", f"good answer {c} mentions lighthouses")
            db.supersede(weak, good)
            first = db.add_summary(cid, user, weak, f"summary {c}")
            db.add_summary(cid, user, good, f"summary {c} again", previous_id=first)
            ids = store.insert("message", [f"chunk of {c}"], conversation_id=cid, message_id=good)
            store.set_vectors(ids, np.eye(DIM, dtype=np.float32)[[c]])
            convs.append((cid, good))
        store.insert("pinned", ["the user likes tea"])
        # The newest conversation goes the way a cascade bypassing the memory store leaves it: its
        # chunk (naming the deleted message) stays until the next start's housekeeping.
        gone_cid, gone_mid = convs[-1]
        db.delete_conversation(gone_cid)
        store.delete(store.insert("note", ["soon forgotten"]))
        assert db.migrations_applied() == [n for n, _ in migrations.MIGRATIONS[:BEFORE]]
        db.close()
    return path, request.param, gone_cid, gone_mid


def test_migration_keeps_rows_indexes_triggers_and_search(old_database):
    path, driver, gone_cid, gone_mid = old_database
    raw = sqlite3.connect(path)
    before = {t: dump(raw, t) for t in (*ID_TABLES, "memory_vectors")}
    old_columns = {t: columns(raw, t) for t in before}
    objects = schema_objects(raw)
    raw.close()

    db = Database(path, driver=driver)
    assert db.migrations_applied() == [n for n, _ in migrations.MIGRATIONS]
    conn = db._conn
    # Later migrations may add columns (0009: conversations.docs): the old ones keep every value.
    assert {t: dump(conn, t, old_columns[t]) for t in before} == before
    later = set(schema_objects(conn)) - set(objects)
    assert set(objects) <= set(schema_objects(conn))  # every table, index, trigger and FTS table is back
    # and only 0009's (documents) and 0015's (the message tree's index) are new
    assert all(name.startswith("doc_") or name == "messages_parent" for _, name, *_ in later), later
    for table in ID_TABLES:
        assert "AUTOINCREMENT" in table_sql(conn, table)
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db.integrity_check() == "ok"
    for fts in ("messages_fts", "memories_fts"):
        conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")

    # Search entries came along; the triggers keep them current.
    assert len(db.search_conversations("harbour")) == 2
    store = MemoryStore(db, "m", DIM)
    assert len(store.keyword_search("chunk", 5)) == 3
    assert [i for i, _ in store.vector_search(np.eye(DIM, dtype=np.float32)[0], 1)] == [before["memories"][0][0]]

    # New ids start above every id still named anywhere in the file: the deleted conversation and
    # message live on in the orphaned memory chunk, so they are not handed out again. (A deleted
    # row that nothing names, like the forgotten note, left no trace to start above.)
    cid = db.create_conversation()
    db.add_message(cid, "user", "a fresh question")  # (the title: what search also matches)
    mid = db.add_message(cid, "assistant", "an answer about submarines")
    (memory_id,) = store.insert("note", ["new fact"])
    assert cid > gone_cid and mid > gone_mid and memory_id > max(r[0] for r in before["memories"])
    assert db.search_conversations("submarines") == [cid]
    db.update_message(mid, content="now about zeppelins")
    assert db.search_conversations("submarines") == [] and db.search_conversations("zeppelins") == [cid]

    # Foreign keys still cascade.
    kept = before["conversations"][0][0]
    db.delete_conversation(kept)
    assert db.messages(kept) == [] and db.summaries(kept) == []
    assert len(db.search_conversations("harbour")) == 1
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
    db.close()


def test_a_database_created_now_has_the_schema_of_a_migrated_one(tmp_path, old_database):
    path, driver, *_ = old_database
    Database(path, driver=driver).close()
    fresh, old = Database(tmp_path / "new.db", driver=driver)._conn, sqlite3.connect(path)
    for table in (*ID_TABLES, "messages_fts", "memories_fts", "memory_vectors"):
        assert table_sql(fresh, table) == table_sql(old, table)
    others = ("SELECT type, name, sql FROM sqlite_master WHERE type IN ('index', 'trigger')"
              " AND name NOT LIKE 'sqlite%' ORDER BY name")
    assert fresh.execute(others).fetchall() == old.execute(others).fetchall()
    old.close()
    fresh.close()
