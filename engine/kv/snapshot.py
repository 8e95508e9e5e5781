"""One conversation's KV state as a value (token ids + llama.cpp's sequence state), and what a
stored state must match to be loaded into a context."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from engine.inference.backend import Backend, llama_version
from engine.inference.generate import common_prefix

__all__ = ["Snapshot", "WINDOW_DOMAIN", "cache_facts", "common_prefix", "take_snapshot", "tokens_digest"]

# The trust domain of the app's own turns (window, terminal chat). A KV state serves another
# conversation's prompt only within its domain: API clients get theirs (engine/server/schema.py
# `api_domain`), so one client's cached prefix never answers, or times, another's guess.
WINDOW_DOMAIN = "window"


def tokens_digest(tokens: list[int]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()


@dataclass
class Snapshot:
    """One conversation's KV state for one model: its token ids and llama.cpp's sequence state,
    and the trust domain of the turns that made it."""

    identity: str
    conversation_id: int | None
    tokens: list[int]
    data: bytearray
    domain: str = WINDOW_DOMAIN

    @property
    def nbytes(self) -> int:
        return len(self.data) + 4 * len(self.tokens)


def take_snapshot(backend: Backend, conversation_id: int | None, domain: str = WINDOW_DOMAIN) -> Snapshot:
    """The context's sequence state as a snapshot (model thread)."""
    data, tokens = backend.save_sequence()
    return Snapshot(backend.identity, conversation_id, tokens, data, domain)


def cache_facts(backend: Backend) -> dict:
    """What a snapshot must match to be loaded into this context."""
    stat = backend.path.stat()
    with open(backend.path, "rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()  # the GGUF header + metadata region
    p = backend.params
    return {"model_name": backend.path.name, "model_size": stat.st_size, "model_mtime_ns": stat.st_mtime_ns,
            "model_head_sha256": head, "llama_cpp": llama_version(), "n_ctx": backend.n_ctx,
            "type_k": p.type_k, "type_v": p.type_v, "swa_full": p.swa_full, "flash_attn": p.flash_attn}
