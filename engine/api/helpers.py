"""Small stateless calls a front-end needs besides the Assistant."""

from __future__ import annotations

from engine.config.paths import db_path
from engine.inference.remote import RemoteClient, RemoteConfig
from engine.storage import Database


def check_remote(url: str, key: str = "", model: str = "", timeout_s: float = 5.0) -> list[str]:
    """The model names an OpenAI-compatible endpoint offers (one quick try, no retries).

    Raises:
        RemoteError: bad URL, unreachable, refused, or not an OpenAI-compatible server.
    """
    client = RemoteClient(RemoteConfig(url, key, model, connect_timeout_s=min(3.0, timeout_s),
                                       read_timeout_s=timeout_s, retries=0))
    try:
        return client.list_models()
    finally:
        client.close()


def database_check(prompt: str) -> dict:
    """The data dir's database, for the installed app's selftest: {"integrity": "ok" | problem,
    "turn_stored": a user message `prompt` and a finished answer are stored}."""
    db = Database(db_path())
    try:
        rows = [m for c in db.conversations() for m in db.messages(c["id"])]
        return {"integrity": db.integrity_check(),
                "turn_stored": any(m["role"] == "user" and m["content"] == prompt for m in rows)
                and any(m["role"] == "assistant" and m["status"] == "done" for m in rows)}
    finally:
        db.close()
