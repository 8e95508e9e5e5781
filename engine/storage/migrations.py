"""Numbered schema migrations, applied in order and recorded in the `migrations` table."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_conversations_messages", """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            model TEXT,
            system_prompt TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL,
            created TEXT NOT NULL,
            model TEXT,
            level TEXT,
            stats TEXT,                -- JSON TurnStats of the turn that produced it
            token_count INTEGER,
            status TEXT NOT NULL DEFAULT 'done' CHECK (status IN ('streaming', 'done')),
            token_ids BLOB,            -- content token ids, int32 little-endian, valid for token_model
            token_model TEXT,          -- backend identity the ids belong to
            logprobs BLOB              -- float32 per sampled token (assistant messages)
        );
        CREATE INDEX messages_by_conversation ON messages (conversation_id, id);
    """),
    ("0002_superseded_answers", """
        -- A low-confidence answer re-asked on a stronger tier stays in the record, out of the context.
        ALTER TABLE messages ADD COLUMN superseded_by INTEGER REFERENCES messages(id) ON DELETE SET NULL;
    """),
    ("0003_conversation_route", """
        -- The user's per-conversation tier override: auto | L1 | L2 | L3.
        ALTER TABLE conversations ADD COLUMN route TEXT NOT NULL DEFAULT 'auto';
    """),
    ("0004_summaries", """
        -- The summary chain: each summary covers messages [first_message_id, last_message_id] and
        -- folds in the previous one, so the newest row stands for everything up to last_message_id.
        CREATE TABLE summaries (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            first_message_id INTEGER NOT NULL,
            last_message_id INTEGER NOT NULL,
            text TEXT NOT NULL,
            model TEXT,
            created TEXT NOT NULL,
            edited INTEGER NOT NULL DEFAULT 0,   -- 1 when the user rewrote it
            previous_id INTEGER REFERENCES summaries(id) ON DELETE SET NULL
        );
        CREATE INDEX summaries_by_conversation ON summaries (conversation_id, id);
    """),
]


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations; return the names applied now."""
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied TEXT NOT NULL)")
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        with conn:  # one transaction per migration: all of it or none
            for statement in filter(str.strip, sql.split(";")):
                conn.execute(statement)
            conn.execute("INSERT INTO migrations (name, applied) VALUES (?, ?)",
                         (name, datetime.now(timezone.utc).isoformat()))
        applied.append(name)
    return applied
