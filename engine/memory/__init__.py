"""Vector memory: explicit memories and past messages, retrieved by meaning and keyword.

`import engine.memory` is cheap: torch and sentence-transformers load on the embedder's own
thread when `Embedder.start()` (or `MemoryService.start()`) is called. See docs/memory.md.
"""

from engine.memory.embedder import (DEFAULT_MODEL, KNOWN_MODELS, EmbedInterrupted, Embedder, EmbedderModel,
                                    EmbedderNotReady)
from engine.memory.remember import parse_remember
from engine.memory.service import Hit, Hits, MemoryInputError, MemoryNotFound, MemoryService
from engine.memory.store import MemoryRow, MemoryStore

__all__ = ["DEFAULT_MODEL", "KNOWN_MODELS", "EmbedInterrupted", "Embedder", "EmbedderModel", "EmbedderNotReady",
           "Hit", "Hits", "MemoryInputError", "MemoryNotFound", "MemoryRow", "MemoryService", "MemoryStore", "parse_remember"]
