"""Settings: defaults in one place, persisted as JSON in the user directory.

`Settings.set` notifies listeners only when a value really changes (the app's settings panel
binds to this; the engine reads it).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable

from engine.config.paths import user_dir

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "tier.L1": "demo-small",         # CPU model (catalog id or path)
    "tier.L2": "demo-int4",          # GPU INT4 model
    "l3.base_url": "",               # OpenAI-compatible endpoint; empty = no L3
    "l3.api_key": "",
    "l3.model": "",
    "l3.n_ctx": 8192,                # the endpoint's context window (for the estimated budget)
    "l3.timeout_s": 60,              # seconds without a byte from the endpoint before it counts as down
    "router.mode": "auto",           # auto | L1 | L2 | L3
    "router.max_switch_s": 1.5,      # cache-aware stickiness: longest re-evaluation worth a switch
    "cascade.enabled": True,         # low-confidence L1 answer → re-answer on L2
    "cascade.threshold": 0.0,        # geometric-mean token probability below which L1 is re-asked;
                                     # 0 = the L1 model's catalog calibration (else 0.35)
    "confidence.warn_threshold": 0.0,  # warn below this geometric-mean token probability;
                                     # 0 = the model's catalog calibration (greedy answers only)
    "summary.every_turns": 5,        # background summary of older turns every N turns; 0 = off
    "memory.enabled": True,          # retrieve memories into turns, index finished messages
    "memory.embedder": "all-MiniLM-L6-v2",  # catalog embedder; others are optional downloads
    "memory.k": 3,                   # memories retrieved per message (above the model's threshold)
    "memory.vector_backend": "auto",  # auto (numpy within the RAM budget, else sqlite-vec) | numpy | sqlite-vec
    "memory.ram_budget_mb": 256.0,   # RAM the in-memory vector search may hold (~170 000 chunks)
    "runtime.n_ctx": 4096,
    "ui.language": "auto",           # auto (system locale) | zh_CN | en
    "ui.theme": "light",             # light | dark
    "kv.warm_budget_mb": 0.0,        # RAM for parked conversations' KV state; 0 = 10 % of RAM up to 1 GB
    "kv.cold_budget_mb": 2048.0,     # disk for KV snapshot files (oldest pruned first)
    "runtime.ram_budget_mb": 0,      # 0 = 80 % of available RAM
    "runtime.vram_budget_mb": -1,    # -1 = free VRAM minus a safety margin
}

# Environment overrides for headless use and tests, e.g. ASSISTANT_L3_BASE_URL.
_ENV_PREFIX = "ASSISTANT_"


def _env_name(key: str) -> str:
    return _ENV_PREFIX + key.upper().replace(".", "_")


class Settings:
    def __init__(self, path: Path | None = None):
        self.path = path or user_dir() / "settings.json"
        self._values: dict[str, Any] = {}
        self._listeners: list[Callable[[str, Any], None]] = []
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                self._values = {k: v for k, v in data.items() if k in DEFAULTS}
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            # A damaged settings file must not stop the app: keep it aside, start from defaults.
            log.warning("settings file %s unreadable (%s); using defaults", self.path, exc)
            try:
                self.path.replace(self.path.with_suffix(".json.bad"))
            except OSError:
                pass

    def get(self, key: str) -> Any:
        env = os.environ.get(_env_name(key))
        default = DEFAULTS[key]
        if env is not None:
            return type(default)(env) if not isinstance(default, bool) else env.lower() in ("1", "true", "yes")
        return self._values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        if key not in DEFAULTS:
            raise KeyError(f"unknown setting {key}")
        with self._lock:
            if self.get(key) == value:
                return
            self._values[key] = value
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            data = json.dumps(self._values, indent=2, ensure_ascii=False).encode("utf-8")
            # It may hold the L3 API key: the user's only from its creation (a chmod after writing
            # left a readable window, and a readable half-written file when the disk was full).
            tmp.unlink(missing_ok=True)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                tmp.replace(self.path)
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
        for listener in list(self._listeners):
            listener(key, value)

    def on_change(self, listener: Callable[[str, Any], None]) -> None:
        self._listeners.append(listener)
