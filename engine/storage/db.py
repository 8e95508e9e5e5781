"""The one SQLite database: conversations and messages. Every write goes through this class.

The connection comes from `sqlean` (SQLite built with extension loading, the `memory` extra) when it
is installed, so sqlite-vec can be loaded; otherwise from the standard library's `sqlite3`, whose
builds often cannot load extensions. `Database.driver` and `Database.vec_version` say which is active.

Plain DB-API calls and SQL, no wrapper library: sqlite-utils was a dependency for three calls
(`enable_wal`, a single PRAGMA; one INSERT; one UPDATE) and brought six more distributions to every
install (tabulate, python-dateutil, pluggy, sqlite-fts4, click-default-group, pip) and ~150 ms of
import time.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
import logging
import os
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from engine.config.paths import private_file
from engine.storage.migrations import apply_migrations

try:  # optional (the `memory` extra): SQLite with extension loading
    import sqlean
except ImportError:
    sqlean = None
try:
    import sqlite_vec
except ImportError:
    sqlite_vec = None

log = logging.getLogger(__name__)

TITLE_CHARS = 60
DRIVERS = ("sqlean", "sqlite3")
# Errors from either driver: sqlean's exception classes do not derive from sqlite3's.
SQLITE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,) + ((sqlean.Error,) if sqlean else ())


# SQLite primary result codes that mean the file system refused: READONLY, IOERR, FULL, CANTOPEN.
_STORAGE_CODES = {8, 10, 13, 14}


class StorageError(OSError):
    """The database could not be opened or written (disk full, read-only data folder, I/O error);
    the message says so and what to do. Nothing committed before it is lost."""


@contextmanager
def _storage_errors(path: Path, doing: str):
    """Turn the file system's refusals into a StorageError for the user; other SQLite errors
    (bugs) pass unchanged."""
    try:
        yield
    except SQLITE_ERRORS as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None or code & 0xFF not in _STORAGE_CODES:
            raise
        raise StorageError(f"could not {doing} the database {path}: {exc}. Is the disk full or the data "
                           "folder read-only? Free some space or fix its permissions, then try again") from exc


# The longest message the engine takes (characters): the Assistant refuses a longer one before
# tokenizing it, memory before indexing it. Here, below both, so they share one number.
MAX_MESSAGE_CHARS = 200_000


def clean_text(text: str) -> str:
    """Text that SQLite and the tokenizer accept: lone surrogates replaced, NULs dropped."""
    return text.encode("utf-8", errors="replace").decode("utf-8").replace("\x00", "")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def encode_ids(ids: list[int] | None) -> bytes | None:
    return None if ids is None else np.asarray(ids, dtype="<i4").tobytes()


def decode_ids(blob: bytes | None) -> list[int] | None:
    return None if blob is None else np.frombuffer(blob, dtype="<i4").tolist()


def _private(path: Path) -> None:
    """The database file, and its WAL and shared-memory files, the user's only (0600): made so
    before SQLite opens it (SQLite gives its -wal and -shm the database file's mode), narrowed when
    an older version left them wider."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600))
    except OSError:
        return  # SQLite says why, in its own words (StorageError)
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        private_file(p)


def _connect(path: Path, driver: str):
    """A connection from `driver`'s module (sqlean's is a drop-in sqlite3.Connection look-alike)."""
    module = sqlean if driver == "sqlean" else sqlite3
    return module.connect(str(path), check_same_thread=False, isolation_level=None)


def _load_sqlite_vec(conn) -> str | None:
    """Load sqlite-vec into `conn`; its version, or None when this connection cannot load it."""
    if sqlite_vec is None or not hasattr(conn, "enable_load_extension"):
        return None
    try:
        conn.enable_load_extension(True)
        try:
            sqlite_vec.load(conn)
        finally:
            # Only our own extension: SQL text must never be able to call load_extension().
            conn.enable_load_extension(False)
        return conn.execute("SELECT vec_version()").fetchone()[0]
    except SQLITE_ERRORS as exc:
        log.warning("sqlite-vec could not be loaded (%s); vector search falls back to numpy", exc)
        return None


class Database:
    """Owns the connections. Thread-safe: every write goes through one connection under one lock;
    reads use a connection of the reading thread's own (WAL: they see every committed write and
    never wait for a writer), except inside that thread's own write transaction.

    Args:
        path: the SQLite file (created with parents if missing).
        driver: "sqlean" or "sqlite3"; None picks sqlean when it is installed.

    Attributes:
        driver: the module the connection came from ("sqlean" | "sqlite3").
        vec_version: sqlite-vec's version when it is loaded into the connection, else None.
    """

    def __init__(self, path: str | Path, driver: str | None = None):
        if driver is None:
            driver = "sqlean" if sqlean is not None else "sqlite3"
        available = [d for d in DRIVERS if d != "sqlean" or sqlean is not None]
        if driver not in available:
            raise ValueError(f"SQLite driver {driver!r} is not available (installed: {', '.join(available)})")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.driver = driver
        _private(self.path)
        with _storage_errors(self.path, "open"):
            conn = _connect(self.path, driver)
            self.vec_version = _load_sqlite_vec(conn)
            conn.execute("PRAGMA foreign_keys = ON")
            # Deleted rows are overwritten with zeros, not left in free pages (`scrub` moves them out
            # of the WAL too). Every write goes through this connection, so it covers them all.
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("PRAGMA busy_timeout = 5000")
            # WAL: readers on their own connections never wait for the writer (see the class).
            # SQLite answers with the mode it could set: a file system without shared memory for
            # the WAL index (some network mounts) keeps the old journal, which still works, slower.
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                log.warning("SQLite kept journal_mode=%s for %s (no WAL here): reads wait for writes", mode, self.path)
            # WAL + NORMAL: a committed transaction survives a killed process (not a power cut).
            conn.execute("PRAGMA synchronous = NORMAL")
            apply_migrations(conn)
        self._conn = conn
        self._local = threading.local()  # per thread: its read connection, its write depth
        self._readers: list = []  # every read connection, closed with the database
        self._readers_lock = threading.Lock()
        self._closed = False

    @contextmanager
    def transaction(self):
        """All statements inside commit together or not at all. The connection is in autocommit
        mode (isolation_level=None), where `with conn:` alone would not open a transaction."""
        with self._lock, _storage_errors(self.path, "write to"):
            self._conn.execute("BEGIN IMMEDIATE")
            self._local.writing = getattr(self._local, "writing", 0) + 1
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:  # SQLite may have rolled back already (disk full)
                    self._conn.execute("ROLLBACK")
                raise
            finally:
                self._local.writing -= 1
            self._conn.execute("COMMIT")

    def scrub(self) -> bool:
        """After a delete: copy the WAL into the database file and empty it, so that the zeroed
        pages replace the deleted text there and no older WAL frame still holds it. False when a
        reader kept part of the WAL (the next checkpoint finishes the job)."""
        with self._lock, _storage_errors(self.path, "write to"):
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            log.info("the database's WAL could not be emptied now (a reader is using it)")
        return not busy

    def close(self) -> None:
        with self._lock:
            self._closed = True
            with self._readers_lock:
                readers, self._readers = self._readers, []
            for reader in readers:
                reader.close()
            self._conn.close()

    def read(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Rows of a read-only statement, on this thread's read connection: a long write on
        another thread (a memory batch) never delays it."""
        return self._select(sql, params)[1]

    def _select(self, sql: str, params: tuple) -> tuple[tuple, list[tuple]]:
        """(column description, rows) of a read: inside this thread's own write transaction on the
        writer (it sees its uncommitted rows), else on the thread's reader."""
        if getattr(self._local, "writing", 0):
            with self._lock:
                cur = self._conn.execute(sql, params)
                return cur.description or (), cur.fetchall()
        with _storage_errors(self.path, "read"):
            cur = self._reader().execute(sql, params)
            return cur.description or (), cur.fetchall()

    def data_version(self) -> int:
        """SQLite's data_version as the writing connection sees it: it changes when another
        process commits, not for this Database's own writes."""
        with self._lock:
            return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def _reader(self):
        conn = getattr(self._local, "reader", None)
        if conn is None:
            with self._readers_lock:
                if self._closed:
                    raise StorageError(f"the database {self.path} is closed")
                conn = _connect(self.path, self.driver)
                conn.execute("PRAGMA query_only = ON")
                conn.execute("PRAGMA busy_timeout = 5000")
                if self.vec_version is not None:
                    _load_sqlite_vec(conn)  # vector search runs its SQL functions on reads too
                self._readers.append(conn)
            self._local.reader = conn
        return conn

    def _q(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        description, rows = self._select(sql, params)
        cols = [c[0] for c in description]
        return [dict(zip(cols, row)) for row in rows]

    # ---- conversations
    def create_conversation(self, model: str | None = None, system_prompt: str = "", title: str = "") -> int:
        now = _now()
        with self._lock, _storage_errors(self.path, "write to"):
            return self._conn.execute(
                "INSERT INTO conversations (title, created, updated, model, system_prompt) VALUES (?, ?, ?, ?, ?)",
                (title, now, now, model, system_prompt)).lastrowid

    def conversation(self, conversation_id: int) -> dict[str, Any] | None:
        rows = self._q("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        return rows[0] if rows else None

    def conversations(self) -> list[dict[str, Any]]:
        return self._q("SELECT * FROM conversations ORDER BY updated DESC, id DESC")

    def update_conversation(self, conversation_id: int, **fields: Any) -> None:
        """Set columns of one conversation (names from this module's callers, never from users).

        Raises:
            LookupError: no conversation has this id (callers check first: a bug).
        """
        fields["updated"] = _now()
        sets = ", ".join(f'"{name}" = ?' for name in fields)
        with self._lock, _storage_errors(self.path, "write to"):
            cursor = self._conn.execute(f"UPDATE conversations SET {sets} WHERE id = ?",
                                        (*fields.values(), conversation_id))
        if cursor.rowcount == 0:
            raise LookupError(f"no conversation {conversation_id}")

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        """Pin or unpin a conversation. Unlike update_conversation this keeps `updated`: pinning
        is not activity, and an unpinned chat goes back to its own date group."""
        with self._lock, _storage_errors(self.path, "write to"):
            cursor = self._conn.execute("UPDATE conversations SET pinned = ? WHERE id = ?",
                                        (int(pinned), conversation_id))
        if cursor.rowcount == 0:
            raise LookupError(f"no conversation {conversation_id}")

    def search_conversations(self, query: str, limit: int = 200) -> list[int]:
        """Ids of conversations whose title or messages contain `query` (case-insensitive
        substring), most recently updated first."""
        # Cleaned as stored text is: a NUL ended FTS5's query string ("unterminated string") and a
        # lone surrogate could not be encoded; both raised.
        query = clean_text(query).strip()
        if not query:
            return [r["id"] for r in self.conversations()][:limit]
        like = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        if len(query) >= 3:  # trigram index; a phrase query matches the substring
            phrase = '"' + query.replace('"', '""') + '"'
            hits = "SELECT m.conversation_id FROM messages_fts f JOIN messages m ON m.id = f.rowid" \
                   " WHERE messages_fts MATCH ?"
            params: tuple = (phrase, like)
        else:
            hits = "SELECT conversation_id FROM messages WHERE content LIKE ? ESCAPE '\\'"
            params = (like, like)
        rows = self._q(f"SELECT id FROM conversations WHERE id IN ({hits}) OR title LIKE ? ESCAPE '\\'"
                       " ORDER BY updated DESC, id DESC LIMIT ?", (*params, limit))
        return [r["id"] for r in rows]

    def delete_conversation(self, conversation_id: int) -> list[int]:
        """Delete a conversation with its messages and summaries (one transaction); the ids of
        the messages that went (their memory chunks and KV files are their owners' to drop)."""
        with self.transaction():
            ids = [r[0] for r in self._conn.execute("SELECT id FROM messages WHERE conversation_id = ?",
                                                    (conversation_id,))]
            self._conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            return ids

    # ---- messages
    def add_message(self, conversation_id: int, role: str, content: str, *, model: str | None = None,
                    level: str | None = None, token_ids: list[int] | None = None, token_model: str | None = None,
                    status: str = "done", model_text: str | None = None, tool_calls: list[dict] | None = None,
                    tool_call_id: str | None = None, parent_id: int | None = None,
                    images: list[dict] | None = None) -> int:
        """Insert and commit a message (and touch the conversation); return its id.
        `model_text`: what the model read, when it differs from `content` (retrieved memories).
        `tool_calls`: an answer's calls (OpenAI-shaped); `tool_call_id`: a tool result's call.
        `parent_id`: the message it follows (None: the chat's first). `images`: [{"digest", "at"}]."""
        now = _now()
        row = {"conversation_id": conversation_id, "role": role, "content": content, "created": now, "model": model,
               "level": level, "token_count": None if token_ids is None else len(token_ids), "status": status,
               "token_ids": encode_ids(token_ids), "token_model": token_model, "model_text": model_text}
        if parent_id is not None:  # named only when set (a database before 0015 has no such column)
            row["parent_id"] = parent_id
        if tool_calls:  # named only when set (a database before 0012 has no such columns)
            row["tool_calls"] = json.dumps(tool_calls, ensure_ascii=False)
        if tool_call_id is not None:
            row["tool_call_id"] = tool_call_id
        if images:
            row["images"] = json.dumps(images)
        with self.transaction():
            cur = self._conn.execute(f"INSERT INTO messages ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                     tuple(row.values()))
            self._conn.execute("UPDATE conversations SET updated = ?, title = CASE WHEN title = '' AND ? = 'user'"
                               " THEN ? ELSE title END WHERE id = ?",
                               (now, role, content.strip()[:TITLE_CHARS], conversation_id))
            return cur.lastrowid

    def update_message(self, message_id: int, *, content: str, token_ids: list[int] | None = None,
                       logprobs: list[float] | None = None, status: str | None = None,
                       stats: dict | None = None, reasoning: str | None = None,
                       reasoning_ids: list[int] | None = None, tool_calls: list[dict] | None = None) -> None:
        """Rewrite a (streaming) message's content and ids; committed at once. `reasoning`,
        `reasoning_ids`: a reasoning model's thinking and the ids sampled for it; `tool_calls`: the
        calls the answer made (None: unchanged)."""
        sets = {"content": content}
        if tool_calls is not None:
            sets["tool_calls"] = json.dumps(tool_calls, ensure_ascii=False) if tool_calls else None
        if reasoning is not None:
            sets["reasoning"] = reasoning
        if reasoning_ids is not None:
            sets["reasoning_ids"] = encode_ids(reasoning_ids)
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
        with self.transaction():
            self._conn.execute(f"UPDATE messages SET {cols} WHERE id = ?", (*sets.values(), message_id))

    def supersede(self, message_ids: int | Iterable[int], by_id: int) -> None:
        """Mark one message, or many, as replaced by `by_id` (off the chat's path), in one commit:
        a branch from early in a long chat leaves hundreds at once, before the answer starts."""
        ids = [message_ids] if isinstance(message_ids, int) else list(message_ids)
        if not ids:
            return  # no commit for nothing: a plain send passes none
        with self.transaction():
            self._conn.executemany("UPDATE messages SET superseded_by = ? WHERE id = ?", [(by_id, i) for i in ids])

    def set_path(self, conversation_id: int, path: list[int]) -> None:
        """Make `path` (message ids, first to last) the chat's current one: every other message of
        it is marked off the path (superseded by the path's last message)."""
        if not path:
            raise ValueError("a chat's path holds at least one message")
        ids = json.dumps(path)
        with self.transaction():
            self._conn.execute("UPDATE messages SET superseded_by = NULL WHERE superseded_by IS NOT NULL"
                               " AND id IN (SELECT value FROM json_each(?))", (ids,))
            self._conn.execute("UPDATE messages SET superseded_by = ? WHERE conversation_id = ? AND superseded_by"
                               " IS NULL AND id NOT IN (SELECT value FROM json_each(?))",
                               (path[-1], conversation_id, ids))

    def delete_messages(self, conversation_id: int, ids: list[int]) -> None:
        """Delete messages, and the summaries from the first of them on (a summary takes in every
        one before it: those would speak of what is gone)."""
        if not ids:
            return
        with self.transaction():
            self._conn.execute("DELETE FROM summaries WHERE conversation_id = ? AND last_message_id >= ?",
                               (conversation_id, min(ids)))
            self._conn.execute("DELETE FROM messages WHERE conversation_id = ? AND id IN"
                               " (SELECT value FROM json_each(?))", (conversation_id, json.dumps(ids)))

    def reparent(self, ids: list[int], parent_id: int | None) -> None:
        with self.transaction():
            self._conn.execute("UPDATE messages SET parent_id = ? WHERE id IN (SELECT value FROM json_each(?))",
                               (parent_id, json.dumps(ids)))

    def messages(self, conversation_id: int) -> list[dict[str, Any]]:
        rows = self._q("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        for row in rows:
            row["token_ids"] = decode_ids(row["token_ids"])
            row["reasoning_ids"] = decode_ids(row["reasoning_ids"])
            row["stats"] = json.loads(row["stats"]) if row["stats"] else None
            row["tool_calls"] = json.loads(row["tool_calls"]) if row["tool_calls"] else None
            row["images"] = json.loads(row["images"]) if row.get("images") else None
        return rows

    def conversation_images(self, conversation_id: int) -> set[str]:
        """The digests of the images a conversation's messages name."""
        rows = self._q("SELECT DISTINCT j.value ->> 'digest' AS digest FROM messages m, json_each(m.images) j"
                       " WHERE m.conversation_id = ? AND m.images IS NOT NULL", (conversation_id,))
        return {r["digest"] for r in rows}

    def images_in_use(self, digests: set[str]) -> set[str]:
        """Which of `digests` a message still names (the rest can leave the image folder)."""
        if not digests:
            return set()
        rows = self._q("SELECT DISTINCT j.value ->> 'digest' AS digest FROM messages m, json_each(m.images) j"
                       " WHERE m.images IS NOT NULL AND j.value ->> 'digest' IN (SELECT value FROM json_each(?))",
                       (json.dumps(sorted(digests)),))
        return {r["digest"] for r in rows}

    # ---- summaries
    def add_summary(self, conversation_id: int, first_message_id: int, last_message_id: int, text: str,
                    model: str | None = None, previous_id: int | None = None) -> int:
        with self.transaction():
            return self._conn.execute(
                "INSERT INTO summaries (conversation_id, first_message_id, last_message_id, text, model, created,"
                " previous_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, first_message_id, last_message_id, text, model, _now(), previous_id)).lastrowid

    def summaries(self, conversation_id: int) -> list[dict[str, Any]]:
        """The chain of the chat's current path, oldest first; the last row stands for everything
        up to its last_message_id. A summary made on another branch waits there (its last message
        is off the path, and so it speaks of turns this path does not have)."""
        return self._q("SELECT s.* FROM summaries s JOIN messages m ON m.id = s.last_message_id"
                       " WHERE s.conversation_id = ? AND m.superseded_by IS NULL ORDER BY s.id", (conversation_id,))

    def edit_summary(self, summary_id: int, text: str) -> bool:
        """Replace a summary's text (marked edited); False when there is no such summary."""
        with self.transaction():
            cur = self._conn.execute("UPDATE summaries SET text = ?, edited = 1 WHERE id = ?", (text, summary_id))
            return cur.rowcount == 1

    def integrity_check(self) -> str:
        # On the writer, under the write lock: on a reader, FTS5's part of the check now and then
        # reported messages_fts malformed while another connection committed (the next check, the
        # writer's, and every search said the index was whole): a race of the check, not damage.
        with self._lock:
            return self._conn.execute("PRAGMA integrity_check").fetchone()[0]

    def migrations_applied(self) -> list[str]:
        return [r["name"] for r in self._q("SELECT name FROM migrations ORDER BY id")]
