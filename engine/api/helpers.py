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


def database_check() -> dict:
    """The data dir's database: {"integrity": "ok" | problem, "messages": [{"role", "content",
    "status"}]} (for the installed app's selftest)."""
    db = Database(db_path())
    try:
        return {"integrity": db.integrity_check(),
                "messages": [{"role": m["role"], "content": m["content"], "status": m["status"]}
                             for c in db.conversations() for m in db.messages(c["id"])]}
    finally:
        db.close()
