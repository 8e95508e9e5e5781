"""Is a model instruction-tuned? A base model continues text instead of answering it (the demo
Gemma 3 270M writes one line over and over), so no default path may pick one for a chat.

The catalog's `instruct` flag decides for its entries. For any other file the GGUF header does,
as a heuristic: a chat template, or a name or fine-tune label that says instruct / it / chat, means
instruction-tuned. Base GGUFs from the big publishers carry neither; a few base models ship a
template anyway (Qwen's do), so a file can be mistaken for instruct, never the other way round
for the ones we know.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from engine.models.catalog import Catalog, ModelNotFound, load_catalog, resolve_model
from engine.models.gguf_info import GGUFError, read_gguf

_LABEL = re.compile(r"(^|[^a-z])(instruct|it|chat|sft|dpo|rlhf)([^a-z]|$)", re.IGNORECASE)


def is_instruct(name_or_path: str, catalog: Catalog | None = None) -> bool | None:
    """True/False for a model the user named (catalog id or .gguf path); None when it can't be
    told (missing or unreadable file): callers treat that as "don't prefer it", never as base."""
    catalog = catalog or load_catalog()
    entry = catalog.get(name_or_path)
    if entry is not None:
        return bool(getattr(entry, "instruct", True))
    try:
        path = resolve_model(name_or_path, catalog).path
    except ModelNotFound:
        return None
    return _file_is_instruct(str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _file_is_instruct(path: str, _mtime: int) -> bool | None:
    try:
        info = read_gguf(Path(path))
    except (GGUFError, OSError):
        return None
    if info.chat_template:
        return True
    labels = [str(info.metadata.get(k, "")) for k in ("general.finetune", "general.name")] + [Path(path).stem]
    return any(name_says_instruct(label) for label in labels)


def name_says_instruct(name: str) -> bool:
    """A model, repository or file name that says instruct / it / chat / sft / dpo / rlhf."""
    return bool(_LABEL.search(name.replace("_", "-")))
