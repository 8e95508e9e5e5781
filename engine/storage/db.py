"""The one SQLite database: conversations and messages. Every write goes through this class."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from engine.storage.migrations import apply_migrations

TITLE_CHARS = 60


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def encode_ids(ids: list[int] | None) -> bytes | None:
    return None if ids is None else np.asarray(ids, dtype="<i4").tobytes()


def decode_ids(blob: bytes | None) -> list[int] | None:
    return None if blob is None else np.frombuffer(blob, dtype="<i4").tolist()


class Database:
    """Owns the connection. Thread-safe: one lock around every statement.

    Args:
        path: the SQLite file (created with parents if missing).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA busy_timeout = 5000")
        self.db = sqlite_utils.Database(conn)
        self.db.enable_wal()
        # WAL + NORMAL: a committed transaction survives a killed process (not a power cut).
        conn.execute("PRAGMA synchronous = NORMAL")
        apply_migrations(conn)
        self._conn = conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _q(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._conn.execute(sql, params)
            cols = [c[0] for c in cur.description] if cur.description else []
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    # ---- conversations
    def create_conversation(self, model: str | None = None, system_prompt: str = "", title: str = "") -> int:
        now = _now()
        with self._lock:
            return self.db["conversations"].insert(
                {"title": title, "created": now, "updated": now, "model": model, "system_prompt": system_prompt}
            ).last_pk

    def conversation(self, conversation_id: int) -> dict[str, Any] | None:
        rows = self._q("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        return rows[0] if rows else None

    def conversations(self) -> list[dict[str, Any]]:
        return self._q("SELECT * FROM conversations ORDER BY updated DESC, id DESC")

    def update_conversation(self, conversation_id: int, **fields: Any) -> None:
        fields["updated"] = _now()
        with self._lock:
            self.db["conversations"].update(conversation_id, fields)

    # ---- messages
    def add_message(self, conversation_id: int, role: str, content: str, *, model: str | None = None,
                    level: str | None = None, token_ids: list[int] | None = None, token_model: str | None = None,
                    status: str = "done") -> int:
        """Insert and commit a message (and touch the conversation); return its id."""
        now = _now()
        with self._lock, self._conn:
            cur = self._conn.execute(
                "INSERT INTO messages (conversation_id, role, content, created, model, level, token_count,"
                " status, token_ids, token_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, now, model, level,
                 None if token_ids is None else len(token_ids), status, encode_ids(token_ids), token_model),
            )
            self._conn.execute("UPDATE conversations SET updated = ?, title = CASE WHEN title = '' AND ? = 'user'"
                               " THEN ? ELSE title END WHERE id = ?",
                               (now, role, content.strip()[:TITLE_CHARS], conversation_id))
            return cur.lastrowid

    def update_message(self, message_id: int, *, content: str, token_ids: list[int] | None = None,
                       logprobs: list[float] | None = None, status: str | None = None,
                       stats: dict | None = None) -> None:
        """Rewrite a (streaming) message's content and ids; committed at once."""
        sets = {"content": content}
        if token_ids is not None:
            sets["token_ids"] = encode_ids(token_ids)
            sets["token_count"] = len(token_ids)
        if logprobs is not None:
            sets["logprobs"] = np.asarray(logprobs, dtype="<f4").tobytes()
        if status is not None:
            sets["status"] = status
        if stats is not None:
            sets["stats"] = json.dumps(stats)
        cols = ", ".join(f"{k} = ?" for k in sets)
        with self._lock, self._conn:
            self._conn.execute(f"UPDATE messages SET {cols} WHERE id = ?", (*sets.values(), message_id))

    def supersede(self, message_id: int, by_id: int) -> None:
        with self._lock, self._conn:
            self._conn.execute("UPDATE messages SET superseded_by = ? WHERE id = ?", (by_id, message_id))

    def messages(self, conversation_id: int) -> list[dict[str, Any]]:
        rows = self._q("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        for row in rows:
            row["token_ids"] = decode_ids(row["token_ids"])
            row["stats"] = json.loads(row["stats"]) if row["stats"] else None
        return rows

    def integrity_check(self) -> str:
        return self._q("PRAGMA integrity_check")[0]["integrity_check"]

    def migrations_applied(self) -> list[str]:
        return [r["name"] for r in self._q("SELECT name FROM migrations ORDER BY id")]
