"""Settings: defaults in one place, persisted as JSON in the user directory.

`Settings.set` notifies listeners only when a value really changes (the app's settings panel
binds to this; the engine reads it). One object per process (`Settings.shared()`); writers in other
processes (`assistant serve`, the CLI) merge their changes under a file lock (issue 22).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from engine.config.locked_file import FileBusy, locked, locked_for_reading, write_atomic
from engine.config.paths import user_dir

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "tier.L1": "demo-small",         # CPU model (catalog id or path)
    "tier.L2": "demo-small",         # GPU INT4 model; the instruction-tuned demo until the user picks
                                     # one (demo-int4 is a base model: tests and benchmarks only)
    "l3.base_url": "",               # OpenAI-compatible endpoint; empty = no L3
    "l3.api_key": "",
    "l3.model": "",
    "l3.n_ctx": 8192,                # the endpoint's context window (for the estimated budget)
    "l3.timeout_s": 60,              # seconds without a byte from the endpoint before it counts as down
    "l3.images": False,              # its model reads images: image turns may go there, as data URLs
    "router.mode": "auto",           # auto | L1 | L2 | L3: a new chat's route when its preset leaves it to auto
    "router.base_models": False,     # auto routing and the cascade may answer with a base model
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
    "retrieval.max_tokens": 256,     # tokens memories and documents may add to one user turn together:
                                     # three short recalled facts (93) + one English excerpt (143); each
                                     # costs ~7 ms of TTFT on demo-small (docs/memory.md). With excerpts,
                                     # memories take half at most.
    "docs.enabled": True,            # index the folders added in the Documents panel / `assistant docs add`
    "docs.k": 4,                     # document excerpts per answer (more for "list all …" questions)
    "docs.allow_remote": False,      # a turn with documents may go to the L3 endpoint (off: stays local)
    "docs.watch": True,              # re-index added folders when their files change
    "docs.code": False,              # also index source code files (by extension)
    "docs.max_file_mb": 64.0,        # larger files are skipped with a reason
    "tools.enabled": False,          # the window offers tools (built-in and mcp.json's MCP servers) to the model;
                                     # off by default: the list costs prompt tokens in every turn
    "generate.repetition_guard": True,  # end an answer that loops (same block or line again and again)
    # Reasoning models (Qwen3, the R1 distills: engine/inference/reasoning.py). A chat's Think switch
    # starts from reasoning.think; off asks Qwen3's template, and closes R1's block at once.
    "reasoning.think": True,
    "reasoning.budget_tokens": 0,    # thinking tokens before the block is closed; 0 = up to 3/4 of max_tokens
    "reasoning.quick_off": True,     # a request the router sends to L1 by its quick-request rules (greetings,
                                     # thanks, short facts) is answered without thinking
    "reasoning.history": "template",  # earlier answers' thinking in the prompt: template (the model's own
                                     # rule: Qwen3 and R1 drop it) | keep | drop
    "speculative.mode": "auto",      # speculative decoding: auto (drafts where they win, off where they lose) |
                                     # off | ngram (drafts from the chat's own tokens, always) | draft (a draft
                                     # model paired with the model in the catalog, always)
    "runtime.n_ctx": 4096,
    "runtime.n_ctx_max": 16384,      # a longer context a model loads with where it was trained for it and
                                     # it costs ≤ 1 GiB more RAM and no GPU layers; 0 = exactly runtime.n_ctx
    "runtime.n_threads": 0,          # CPU threads per model; 0 = automatic: calibrated per model, fewer while
                                     # other programs are busy; N = N threads, never changed (at the next start)
    "ui.language": "auto",           # auto (system locale) | zh_CN | en
    "ui.theme": "system",            # system (follows the OS, live) | light | dark
    "ui.resources_panel": False,     # the gauges pinned beside the chat (off: a popover from the top bar's indicator)
    "ui.welcome_done": False,        # the first-start welcome was dismissed or used (app/welcome.py)
    # The update check (engine/update): off until the user says yes (the window asks once); it reads one
    # signed file, at most once a day, and never downloads or runs anything itself.
    "updates.check": "ask",          # ask (not asked yet: off) | on | off
    "updates.last_check": 0.0,       # when it last read the manifest (epoch seconds)
    "updates.newest_seen": "",       # the newest version a verified manifest named: an older one is a replay
    "models.hub": "auto",            # where models download from: auto (by UI locale) | a hub id
                                     # (engine/models/hubs.py: huggingface, hf-mirror, modelscope)
    "kv.warm_budget_mb": 0.0,        # RAM for parked conversations' KV state; 0 = 10 % of RAM up to 1 GB
    "kv.cold_budget_mb": 2048.0,     # disk for KV snapshot files (oldest pruned first)
    "runtime.ram_budget_mb": 0,      # 0 = 80 % of available RAM
    "runtime.vram_budget_mb": -1,    # -1 = free VRAM minus a safety margin
    "runtime.gpu_device": "auto",    # auto (best real GPU) | none (CPU only) | a ggml device name, e.g. Vulkan0
    # The local OpenAI-compatible API server (engine/server, `assistant serve`): no listening socket
    # unless it is turned on; the API key lives in its own 0600 file in the data dir, not here.
    "server.enabled": False,
    "server.host": "127.0.0.1",      # a non-loopback address also needs server.allow_network
    "server.port": 8765,             # 0 = any free port (tests)
    "server.allow_network": False,   # may bind to an address other machines can reach
    "server.cors_origins": "",       # browser origins allowed (space or comma separated); empty = CORS off
    "server.store_conversations": False,  # keep API conversations in the chat list (off: deleted when done)
    "server.allow_memory": False,    # API clients may use the memory (x_memory: recall, "remember that")
    "server.allow_docs": False,      # API clients may read the documents (x_docs: excerpts, file names)
    "server.max_body_mb": 8.0,       # larger request bodies get 413
    "server.max_messages": 1000,     # messages in one chat request
    "server.queue_depth": 16,        # requests waiting for the engine; more get 429
    "server.request_timeout_s": 600,  # a request's whole time (queue + answer); then it is cancelled
    "server.max_tool_tokens": 4096,  # tokens a request's tools may add to its prompt; more get 400
}

# Environment overrides for headless use and tests, e.g. ASSISTANT_L3_BASE_URL.
_ENV_PREFIX = "ASSISTANT_"


def _env_name(key: str) -> str:
    return _ENV_PREFIX + key.upper().replace(".", "_")


class Settings:
    """The settings file, typed. Several objects, threads and processes (the window, `assistant
    serve`) may share one file: a change is merged into what the file holds at that moment, under
    a lock that holds across processes, and `get` sees changes others made."""

    _shared: "Settings | None" = None
    _shared_lock = threading.Lock()

    def __init__(self, path: Path | None = None):
        self.path = path or user_dir() / "settings.json"
        self._values: dict[str, Any] = {}
        self._seen: tuple | None = None  # the file's identity when last read (see _fresh)
        self._listeners: list[Callable[[str, Any], None]] = []
        self._lock = threading.RLock()  # set() reads the old value, which may note a problem
        self._problems: list[str] = []
        self._load()

    @classmethod
    def shared(cls) -> "Settings":
        """This process's settings object for the user dir: the window, the engine and the API
        server share it, so one change is heard once by all. A changed ASSISTANT_HOME (tests) gets
        a new one."""
        path = user_dir() / "settings.json"
        with cls._shared_lock:
            if cls._shared is None or cls._shared.path != path:
                cls._shared = cls(path)
            return cls._shared

    def _load(self) -> None:
        """Read the file (under its lock: on Windows a reader would make a writer's rename fail)."""
        with self._lock, locked_for_reading(self.path):
            try:
                with open(self.path, "rb") as f:
                    self._seen = _identity(os.fstat(f.fileno()))  # of what is read, not of a later file
                    data = json.loads(f.read().decode("utf-8"))
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                self._values = {k: v for k, v in data.items() if k in DEFAULTS}
            except FileNotFoundError:
                self._values, self._seen = {}, None
            except (OSError, ValueError) as exc:
                # A damaged settings file must not stop the app: keep it aside, start from defaults.
                self._values = {}
                self._problem(f"settings file {self.path} is unreadable ({exc}); it was kept as "
                              f"{self.path.with_suffix('.json.bad').name} and the defaults are used")
                try:
                    self.path.replace(self.path.with_suffix(".json.bad"))
                    self._seen = None
                except OSError:
                    pass

    def _fresh(self) -> None:
        """Read the file again if another writer replaced it since: one stat when it did not.
        Every write renames a new file in, so its inode, time or size differ (a same-size rewrite
        in the same clock tick onto a reused inode can be missed by get(); never by set())."""
        try:
            now = _identity(os.stat(self.path))
        except OSError:
            now = None
        if now != self._seen:
            try:
                self._load()
            except FileBusy as exc:  # a hung writer: go on with what was read last
                log.warning("%s", exc)

    def get(self, key: str) -> Any:
        """The setting's value, of its default's type; a value of the wrong type or out of range
        (a hand-edited file, a bad environment variable) gives the default and a problem note."""
        default = DEFAULTS[key]
        env = os.environ.get(_env_name(key))
        if env is not None:
            value, where = _from_env(env, default), f"environment variable {_env_name(key)}"
        else:
            self._fresh()
            values = self._values  # one snapshot: another thread's read may swap it
            if key not in values:
                return default
            value, where = values[key], str(self.path)
        checked = _checked(key, value)
        if checked is _INVALID:
            self._problem(f"setting {key} = {value!r} in {where} is not valid "
                          f"({_expected(key)}); using the default {default!r}")
            return default
        return checked

    def reload(self) -> None:
        """Read the file again (get() does when it changed; this reads it whatever its time)."""
        self._load()

    def problems(self) -> list[str]:
        """What was wrong with the settings file or environment, in words for the user."""
        with self._lock:
            return list(self._problems)

    def _problem(self, text: str) -> None:
        with self._lock:
            if text not in self._problems:
                self._problems.append(text)
                log.warning("%s", text)

    def set(self, key: str, value: Any) -> None:
        """Store a value (ValueError if it is not valid for `key`) and tell the listeners."""
        self.set_many({key: value})

    def set_many(self, values: dict[str, Any]) -> None:
        """Store several values in one write (all checked first: one invalid stores none). Only
        the keys whose value changes are written, into what the file holds now; each is told to
        the listeners."""
        for key in values:
            if key not in DEFAULTS:
                raise KeyError(f"unknown setting {key}")
        checked = {key: _checked(key, value) for key, value in values.items()}
        for key, value in checked.items():
            if value is _INVALID:
                raise ValueError(f"setting {key}: {_expected(key)}")
        with self._lock, locked(self.path):
            self._load()  # what other objects and processes wrote since: theirs stays
            changed = {k: v for k, v in checked.items() if self.get(k) != v}
            if changed:
                merged = {**self._values, **changed}
                # It may hold the L3 API key: the user's only (0600) from its creation.
                write_atomic(self.path, json.dumps(merged, indent=2, ensure_ascii=False).encode("utf-8"))
                self._values, self._seen = merged, _identity(os.stat(self.path))
        for key, value in changed.items():
            for listener in list(self._listeners):
                listener(key, value)

    def on_change(self, listener: Callable[[str, Any], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str, Any], None]) -> None:
        """Stop telling `listener` (a dialog's, when it closes: the shared object outlives it)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    @contextmanager
    def changes(self) -> Iterator[list[str]]:
        """The keys changed through this object meanwhile (a dialog's edits), in order; the
        listener goes at the end (the shared object outlives the dialog)."""
        changed: list[str] = []

        def heard(key: str, _value: Any) -> None:
            changed.append(key)

        self.on_change(heard)
        try:
            yield changed
        finally:
            self.remove_listener(heard)


def _identity(st: os.stat_result) -> tuple:
    return st.st_ino, st.st_mtime_ns, st.st_size


# Allowed values beyond the default's type.
CHOICES: dict[str, tuple[str, ...]] = {
    "router.mode": ("auto", "L1", "L2", "L3"),
    "memory.vector_backend": ("auto", "numpy", "sqlite-vec"),
    "ui.language": ("auto", "zh_CN", "en"),
    "ui.theme": ("system", "light", "dark"),
    "reasoning.history": ("template", "keep", "drop"),
    "speculative.mode": ("auto", "off", "ngram", "draft"),
    "updates.check": ("ask", "on", "off"),
}
# Inclusive numeric ranges.
RANGES: dict[str, tuple[float, float]] = {
    "l3.n_ctx": (256, 10_000_000), "l3.timeout_s": (1, 3600), "router.max_switch_s": (0, 600),
    "cascade.threshold": (0, 1), "confidence.warn_threshold": (0, 1), "summary.every_turns": (0, 1000),
    "memory.k": (0, 50), "retrieval.max_tokens": (0, 100_000), "docs.k": (0, 50),
    "docs.max_file_mb": (0.001, 1_000_000), "memory.ram_budget_mb": (0, 1_000_000), "runtime.n_ctx": (64, 10_000_000),
    "runtime.n_ctx_max": (0, 10_000_000), "runtime.n_threads": (0, 1024),
    "kv.warm_budget_mb": (0, 10_000_000), "kv.cold_budget_mb": (0, 100_000_000),
    "runtime.ram_budget_mb": (0, 100_000_000), "runtime.vram_budget_mb": (-1, 100_000_000),
    "server.port": (0, 65535), "server.max_body_mb": (0.001, 1024), "server.max_messages": (1, 100_000),
    "server.queue_depth": (1, 10_000), "server.request_timeout_s": (1, 86_400),
    "server.max_tool_tokens": (256, 1_000_000),
    "reasoning.budget_tokens": (0, 1_000_000),
}
_INVALID = object()


def _checked(key: str, value: Any) -> Any:
    """`value` as the type of the key's default, or _INVALID."""
    default = DEFAULTS[key]
    if isinstance(default, bool):
        return value if isinstance(value, bool) else _INVALID
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN
            return _INVALID
        if isinstance(default, int) and not float(value).is_integer():
            return _INVALID
        value = type(default)(value)
        low, high = RANGES.get(key, (float("-inf"), float("inf")))
        return value if low <= value <= high else _INVALID
    if not isinstance(value, str):
        return _INVALID
    return value if key not in CHOICES or value in CHOICES[key] else _INVALID


def _expected(key: str) -> str:
    default = DEFAULTS[key]
    if key in CHOICES:
        return "one of " + ", ".join(CHOICES[key])
    if key in RANGES:
        low, high = RANGES[key]
        return f"a number from {low:g} to {high:g}"
    return f"a {type(default).__name__}"


def _from_env(text: str, default: Any) -> Any:
    if isinstance(default, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, (int, float)):
        try:
            return float(text)
        except ValueError:
            return text  # reported as invalid by _checked
    return text
