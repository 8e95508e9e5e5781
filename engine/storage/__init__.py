"""SQLite storage: one file in WAL mode, numbered migrations, all writes through `Database`."""

from engine.storage.db import Database, StorageError, clean_text, decode_ids, encode_ids

__all__ = ["Database", "StorageError", "clean_text", "decode_ids", "encode_ids"]
