"""SQLite storage: one file in WAL mode, numbered migrations, all writes through `Database`."""

from engine.storage.db import Database, decode_ids, encode_ids

__all__ = ["Database", "decode_ids", "encode_ids"]
