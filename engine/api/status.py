"""The status snapshot: what the gauges show, published by a thread of the engine's own.

Readers (a GUI timer) take `latest`, a plain dict replaced whole every STATUS_S; building it reads
only what the owners published (each model's `ContextView`, the manager's `published` workers, the
KV tiers' own accounting), so no reader ever touches a native object or waits on an engine lock.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from engine.models.devices import snapshot

if TYPE_CHECKING:  # the publisher belongs to the Assistant; only its type is needed here
    from engine.api.assistant import Assistant

log = logging.getLogger(__name__)

STATUS_S = 0.5  # the gauges redraw at 2 Hz


class StatusPublisher:
    def __init__(self, assistant: "Assistant"):
        self.assistant = assistant
        self.latest: dict = {"ready": False}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-status", daemon=True)

    def start(self) -> None:
        self.refresh()
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._closing.wait(STATUS_S):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a gauge must never stop the engine
                log.exception("status snapshot failed")

    def refresh(self) -> None:
        a = self.assistant
        workers = a.manager.published
        tiers = a.published_tiers  # the engine thread's own `tiers` is not this thread's to read
        models = []
        for w in workers:
            v = w.view
            levels = [lvl for lvl, name in tiers.items() if name and _names(name, w)]
            models.append({"id": w.model.id, "identity": v.identity, "levels": levels, "n_ctx": v.n_ctx,
                           "kv_tokens": len(v.kv_tokens), "conversation_id": v.conversation_id,
                           "offload": w.plan.offload if w.plan else None,
                           "device": w.offload,
                           # engine/inference/thread_policy.py ThreadState: threads now and why
                           "threads": asdict(t) if (t := getattr(w.backend, "threads", None)) else None,
                           "demo": bool(w.model.entry and w.model.entry.demo)})
        kv = a.kv_pages()
        devices = snapshot()
        gpu = devices.gpu(a.manager.gpu_device)
        memory = a.memory.status() if a.memory is not None else None
        documents = a.docs.status() if a.docs is not None else None
        self.latest = {"ready": True, "time": time.time(), "models": models, "kv": kv,
                       "devices": devices.as_dict(), "gpu": asdict(gpu) if gpu else None, "memory": memory, "documents": documents,
                       "degraded": a.degraded,
                       "tiers": dict(tiers), "remote": a.remote.model_name if a.remote else None,
                       "water": dict(a.water), "warnings": list(a.warnings) + [n for w in workers if (n := w.load_note)]}


def _names(name: str, worker) -> bool:
    """Whether a tier setting (catalog id or .gguf path) names this loaded model; no catalog
    parsing and no file access beyond a path's resolution, at 2 Hz."""
    if name == worker.model.id:
        return True
    try:
        return Path(name).expanduser().resolve() == worker.model.path
    except (OSError, RuntimeError):
        return False
