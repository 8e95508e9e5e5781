"""What earlier runs left on disk, read without an engine (no model loads): a conversation's
summary chain (`assistant summary`) and the KV snapshot files (`assistant stats`)."""

from __future__ import annotations

from engine.chat.conversation import ConversationNotFound
from engine.config.paths import db_path, user_dir
from engine.config.settings import Settings
from engine.kv.cold import ColdTier, parse_file_name
from engine.kv.tiers import PAGE_TOKENS
from engine.storage import Database

__all__ = ["kv_on_disk", "summary_chain"]


def summary_chain(conversation_id: int) -> list[dict]:
    """The conversation's summaries, oldest first: {"id", "first_message_id", "last_message_id",
    "model", "edited", "text", …}; empty when none was made yet.

    Raises:
        ConversationNotFound: no conversation has that id.
    """
    db = Database(db_path())
    try:
        if db.conversation(conversation_id) is None:
            raise ConversationNotFound(f"no conversation with id {conversation_id}")
        return db.summaries(conversation_id)
    finally:
        db.close()


def kv_on_disk(settings: Settings | None = None) -> dict:
    """The cold tier's files: {"page_tokens", "cold_files": [{"file", "conversation_id", "tokens",
    "pages", "bytes"}], "cold_bytes", "cold_budget_bytes"}. "tokens" and "pages" are None for a
    file whose header cannot be read; files the cold tier did not name are left out."""
    settings = settings or Settings.shared()
    cold = ColdTier(user_dir() / "kv", int(settings.get("kv.cold_budget_mb") * 1e6))
    files = []
    for path, size, mtime in sorted(cold.files(), key=lambda t: t[0].name):
        parsed = parse_file_name(path.name)
        if parsed is None:
            continue
        n = cold.token_count(path, mtime)
        files.append({"file": path.name, "conversation_id": parsed[0], "tokens": n,
                      "pages": None if n is None else -(-n // PAGE_TOKENS), "bytes": size})
    return {"page_tokens": PAGE_TOKENS, "cold_files": files, "cold_bytes": sum(f["bytes"] for f in files),
            "cold_budget_bytes": cold.budget_bytes}
