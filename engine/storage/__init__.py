"""SQLite storage: one file in WAL mode, numbered migrations, all writes through `Database`."""

from engine.storage.db import MAX_MESSAGE_CHARS, Database, StorageError, clean_text, decode_ids, encode_ids
from engine.storage.db import _now as now  # UTC, ISO 8601 with milliseconds: every table's timestamps

__all__ = ["MAX_MESSAGE_CHARS", "Database", "StorageError", "clean_text", "decode_ids", "encode_ids", "now"]
