"""A deterministic pure-Python stand-in for engine.inference.backend.Backend.

It has the surface the engine uses (tokens, KV bookkeeping, pieces with `stop()`, save/restore,
scripted sampling) and no weights: turn logic (cascade, window, KV reuse, pre-emption, cancel,
failed decodes) is tested in milliseconds with exact counts. Nothing here is about llama.cpp;
tests/model/ checks the real backend keeps the same promises.

Vocabulary: ids 0-255 are bytes; four control tokens follow (ChatML's markers, BOS, EOS). The
engine's ChatML fallback template fits it, so prompts are plain readable bytes.

    fakes = FakeModels(tmp_path)                  # the backend factory
    l1 = fakes.model_file("l1")                   # a tiny real GGUF to plan from and resolve
    fakes.script("l1").enqueue(Answer("Hi.", logprob=-2.0))
    manager = ModelManager(params=..., backend_factory=fakes)
    ... fakes.backend("l1").history / .evaluated / .prompts / .calls
"""

from __future__ import annotations

import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from engine.api import Assistant, EngineConfig, TurnDone
from engine.config.paths import db_path
from engine.inference.backend import LoadParams, SamplingParams
from engine.inference.errors import ContextFull, DecodeError, DeviceMemoryError, ModelLoadError
from engine.inference.events import GenerateParams
from engine.inference.manager import ModelManager
from engine.models.devices import DeviceSnapshot, GPUInfo
from engine.config.ownership import adopt, owned
from engine.storage import Database
from tests.fake_vocab import (BOS, EOS, IM_END, N_VOCAB, SPECIAL_TEXT, FakeVocab, _detokenize, _token_bytes, _tokenize,
                              write_tiny_gguf)

class FakeDecodeError(DecodeError):
    """What a failed llama_decode looks like to the engine (Backend.eval raises DecodeError)."""


@dataclass
class Answer:
    """One scripted answer: its text (byte tokens), then an end-of-turn token unless `stop` is
    False (then the text repeats until max_tokens or Stop). `logprob` is every token's, or a list
    (the last value repeats)."""

    text: str
    logprob: float | list[float] = -0.05
    stop: bool = True

    def logprob_at(self, i: int) -> float:
        if isinstance(self.logprob, list):
            return self.logprob[min(i, len(self.logprob) - 1)]
        return self.logprob


class Script:
    """What a model answers: a rule whose text occurs in the prompt, else the next queued answer,
    else a numbered default ("Answer 1.", "Answer 2.", …, confident)."""

    def __init__(self):
        self._queue: deque[Answer] = deque()
        self._rules: list[tuple[str, Answer]] = []
        self._lock = threading.Lock()
        self.served: list[Answer] = []

    def enqueue(self, *answers: Answer | str) -> "Script":
        with self._lock:
            self._queue.extend(a if isinstance(a, Answer) else Answer(a) for a in answers)
        return self

    def when(self, substring: str, answer: Answer | str) -> "Script":
        """Answer every prompt containing `substring` with `answer` (not consumed)."""
        with self._lock:
            self._rules.append((substring, answer if isinstance(answer, Answer) else Answer(answer)))
        return self

    def next(self, prompt_text: str) -> Answer:
        with self._lock:
            answer = next((a for s, a in self._rules if s in prompt_text), None)
            if answer is None:
                answer = self._queue.popleft() if self._queue else Answer(f"Answer {len(self.served) + 1}.")
            self.served.append(answer)
            return answer


class _Sampler:
    def __init__(self, answer: Answer, tokens: list[int]):
        self.answer, self.tokens, self.n = answer, tokens, 0


# ---- hooks

class Gate:
    """A hook that pauses the model's thread where `when(...)` says, until released.

        gate = Gate(lambda b, piece, part, call: piece == 1 and "summarise" in b.text(call))
        fake.on_piece.append(gate)
        gate.reached.wait(5); ...; gate.release()

    Fires `times` times (each time it waits for a release; `release` opens the current one)."""

    def __init__(self, when: Callable[..., bool], times: int = 1, timeout: float = 10.0):
        self.when, self.times, self.timeout = when, times, timeout
        self.reached = threading.Event()
        self._open = threading.Event()
        self.fired = 0

    def __call__(self, *args) -> None:
        if self.fired >= self.times or not self.when(*args):
            return
        self.fired += 1
        self._open.clear()
        self.reached.set()
        if not self._open.wait(self.timeout):
            raise TimeoutError("gate never released")  # a broken test must not hang the suite

    def release(self) -> None:
        self.reached.clear()
        self._open.set()


# ---- the backend

class FakeBackend:
    """Duck-types `Backend` for the engine. Counters are exact: `history` holds every piece evaluated
    (one per decode call), `prompts` the KV each answer was sampled from, `calls` each cache operation.

    Like a real backend it belongs to one thread (engine/config/ownership.py): what a `Backend` guards
    raises WrongThread from any other (the suite checks). A test reads `kv`, `text`, the counters.

    Args:
        path: the model file (its name and size make the identity, as for a real backend).
        params: load parameters (n_ctx, n_batch as given; the rest is recorded only).
        script: answers for `make_sampler`/`sample`.
        prompt_s_per_token, decode_s_per_token: simulated speed (default: instant).
        can_shift: llama.cpp can shift this cache (False: like a sliding-window model).
        can_rollback: keep_prefix to a shorter prefix works (False: it clears, like SWA).
        load_error: refuse to load with this ModelLoadError message (a broken model file).
        gpu_layers_fit: a GPU load with more layers than this fails with DeviceMemoryError, as
            llama.cpp does when a device buffer cannot be allocated (None: any number fits).
        gpu_error: a GPU load (any layers) fails with this ModelLoadError (a broken driver).
    """

    vision = None  # a text model: no projector

    def __init__(self, path: str | Path, params: LoadParams = LoadParams(), debug: bool = False, *,
                 script: Script | None = None, prompt_s_per_token: float = 0.0, decode_s_per_token: float = 0.0,
                 can_shift: bool = True, can_rollback: bool = True, add_bos: bool = False,
                 arch: str = "llama", chat_template: str | None = None, n_swa: int = 0,
                 load_error: str | None = None, gpu_layers_fit: int | None = None,
                 gpu_error: str | None = None):
        adopt(self)
        self.path = Path(path)
        if load_error is not None:
            raise ModelLoadError(load_error)
        if params.n_gpu_layers > 0 and gpu_error is not None:
            raise ModelLoadError(gpu_error)
        if params.n_gpu_layers > 0 and gpu_layers_fit is not None and params.n_gpu_layers > gpu_layers_fit:
            raise DeviceMemoryError(f"out of device memory with {params.n_gpu_layers} layers")
        if not self.path.is_file():
            raise ModelLoadError(f"no such model file: {self.path}")
        self.params = params
        self.script = script or Script()
        self.prompt_s_per_token, self.decode_s_per_token = prompt_s_per_token, decode_s_per_token
        self.can_shift, self.can_rollback = can_shift, can_rollback
        self.add_bos, self.arch, self.chat_template_source, self.n_swa = add_bos, arch, chat_template, n_swa
        self.bos_id, self.eos_id, self.n_vocab = BOS, EOS, N_VOCAB
        self.identity = f"{self.path.name}:{self.path.stat().st_size}"
        self.vocab = FakeVocab(self.identity, add_bos)
        self.memory_report = {"weights": {}, "kv": {}, "compute": {}, "output": {}, "kv_caches": [],
                              "weights_bytes": 0, "kv_bytes": 0, "compute_bytes": 0, "output_bytes": 0,
                              "weights_repack_bytes": 0, "model_size_bytes": 0}
        on_gpu = params.n_gpu_layers > 0
        self.offload = {"backend": "fake" if on_gpu else "cpu", "device": params.gpu_device if on_gpu else None,
                        "n_gpu_layers": params.n_gpu_layers, "n_layers": 0}
        self._kv: list[int] = []
        self.history: list[list[int]] = []  # every piece evaluated, in order
        self.prompts: list[list[int]] = []  # KV contents at each make_sampler: the prompt answered
        self.calls: list[tuple] = []  # ("eval", asked, done) ("keep_prefix", n, ok) ("shift_out", …) …
        self.samples = 0
        self.grammars: list[str | None] = []  # each grammar asked for: at make_sampler, then by constrain
        self.samplings: list[SamplingParams] = []  # each answer's sampling parameters
        self.on_piece: list[Callable] = []  # hook(backend, piece_index, part, call_tokens), mid-piece
        self.on_sample: list[Callable] = []  # hook(backend, n_sampled_this_answer) before each sample
        self._fail_in: int | None = None  # pieces left before a decode fails
        self.closed = False

    # ---- facts
    @property
    def n_ctx(self) -> int:
        return self.params.n_ctx

    @property
    def n_kv(self) -> int:
        return len(self._kv)

    @property
    def evaluated(self) -> int:
        """Tokens evaluated since load (prompt pieces and decoded tokens alike)."""
        return sum(len(p) for p in self.history)

    def text(self, tokens: list[int]) -> str:
        """Tokens as text with control tokens spelled out (for assertions and hooks)."""
        return "".join(SPECIAL_TEXT.get(t) or chr(t) for t in tokens)

    @property
    def kv(self) -> list[int]:
        """The cache's ids, for a test's assertions (the engine reads `kv_tokens`, on the model's thread)."""
        return list(self._kv)

    @owned
    def token_text(self, token: int) -> str:
        return SPECIAL_TEXT.get(token) or bytes([token]).decode("latin-1")

    @owned
    def is_eog(self, token: int) -> bool:
        return token in (EOS, IM_END)

    # ---- tokens
    @owned
    def tokenize(self, text: str, special: bool) -> list[int]:
        return _tokenize(text, special)

    @owned
    def tokenize_control(self, text: str) -> list[int]:
        return _tokenize(text, special=True)

    @owned
    def token_bytes(self, token: int) -> bytes:
        return _token_bytes(token)

    @owned
    def detokenize(self, tokens: list[int]) -> str:
        return _detokenize(tokens)

    # ---- KV cache
    @property
    @owned
    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    @owned
    def reset(self) -> None:
        self.calls.append(("reset",))
        self._kv.clear()

    @owned
    def keep_prefix(self, n: int) -> bool:
        if n >= len(self._kv):
            return True
        ok = n == 0 or self.can_rollback
        self.calls.append(("keep_prefix", n, ok))
        if not ok:
            self._kv.clear()
            return False
        del self._kv[n:]
        return True

    @owned
    def shift_out(self, n_keep: int, n_discard: int) -> bool:
        if n_discard <= 0 or n_keep + n_discard > len(self._kv) or not self.can_shift:
            self.calls.append(("shift_out", n_keep, n_discard, False))
            return False
        del self._kv[n_keep:n_keep + n_discard]
        self.calls.append(("shift_out", n_keep, n_discard, True))
        return True

    @owned
    def save_sequence(self) -> tuple[bytearray, list[int]]:
        self.calls.append(("save", len(self._kv)))
        data = bytearray(b"FAKEKV" + struct.pack(f"<{len(self._kv)}i", *self._kv))
        return data, list(self._kv)

    @owned
    def restore_sequence(self, saved) -> bool:
        data, tokens = saved
        self.calls.append(("restore", len(tokens)))
        self._kv.clear()
        if not tokens:
            return True
        if len(tokens) > self.n_ctx or bytes(data[6:]) != struct.pack(f"<{len(tokens)}i", *tokens):
            return False
        self._kv[:] = tokens
        return True

    def fail_after(self, pieces: int) -> None:
        """The next `pieces` decode calls (prompt pieces or decoded tokens) succeed, the one after
        raises FakeDecodeError; the cache keeps what the earlier pieces evaluated."""
        self._fail_in = pieces

    @owned
    def eval(self, tokens: list[int], piece: int | None = None, stop: Callable[[], bool] | None = None) -> int:
        if self.closed:
            raise RuntimeError("backend closed")
        if len(self._kv) + len(tokens) > self.n_ctx:
            raise ContextFull(len(self._kv) + len(tokens), self.n_ctx)
        step = max(1, min(piece or self.params.n_batch, self.params.n_batch))
        done = index = 0
        while done < len(tokens):
            if stop is not None and stop():
                break
            part = tokens[done:done + step]
            for hook in list(self.on_piece):
                hook(self, index, part, tokens)
            if self._fail_in is not None:
                if self._fail_in == 0:
                    self._fail_in = None
                    self.calls.append(("eval", len(tokens), done, "failed"))
                    raise FakeDecodeError(f"llama_decode returned -1 (after {done} of {len(tokens)} tokens)")
                self._fail_in -= 1
            if self.prompt_s_per_token and len(part) > 1:
                time.sleep(self.prompt_s_per_token * len(part))
            self._kv.extend(part)
            self.history.append(list(part))
            done += len(part)
            index += 1
        self.calls.append(("eval", len(tokens), done))
        return done

    @owned
    def eval_rows(self, tokens: list[int], rows_from: int) -> None:
        """A speculative pass: the scripted answer is what it is, so each row samples the script."""
        if len(self._kv) + len(tokens) > self.n_ctx:
            raise ContextFull(len(self._kv) + len(tokens), self.n_ctx)
        self._kv.extend(tokens)
        self.history.append(list(tokens))
        self.calls.append(("eval_rows", len(tokens), rows_from))

    # ---- sampling
    @owned
    def make_sampler(self, p: SamplingParams, grammar: str | None = None) -> _Sampler:
        self.grammars.append(grammar)
        self.samplings.append(p)
        self.prompts.append(list(self._kv))
        answer = self.script.next(self.text(self._kv))
        return _Sampler(answer, _tokenize(answer.text, special=False))

    @owned
    def constrain(self, sampler: _Sampler, grammar: str | None, written: list[int] = ()) -> bool:
        """Recorded only: the scripted answer is what it is (a real grammar: tests/model/)."""
        self.grammars.append(grammar)
        return True

    @owned
    def sample(self, sampler: _Sampler, row: int = -1) -> tuple[int, float]:
        for hook in list(self.on_sample):
            hook(self, sampler.n)
        if self.decode_s_per_token:
            time.sleep(self.decode_s_per_token)
        a, i = sampler.answer, sampler.n
        if i < len(sampler.tokens):
            token = sampler.tokens[i]
        elif a.stop or not sampler.tokens:
            token = IM_END
        else:
            token = sampler.tokens[i % len(sampler.tokens)]
        sampler.n += 1
        self.samples += 1
        return token, a.logprob_at(i)

    @owned
    def close(self) -> None:
        self.closed = True


@dataclass
class _ModelSetup:
    script: Script = field(default_factory=Script)
    options: dict = field(default_factory=dict)


class FakeModels:
    """The backend factory for `ModelManager(backend_factory=...)`: one script and options per
    model file (by stem), every backend it built, in order.

    Args:
        folder: where `model_file` writes its tiny GGUFs.
    """

    def __init__(self, folder: Path, **defaults):
        self.folder = Path(folder)
        self.defaults = defaults  # FakeBackend options for every model
        self._setup: dict[str, _ModelSetup] = {}
        self.built: list[FakeBackend] = []
        self.loads: list[tuple[str, LoadParams]] = []  # (file stem, params) of every load

    def model_file(self, stem: str, n_layers: int = 2, instruct: bool = True, context_length: int = 8192,
                   **options) -> Path:
        """A tiny GGUF named `<stem>.gguf` (planned like any model file); `options` for its backends;
        `instruct=False`: a base model's file (no chat template)."""
        self.setup(stem).options.update(options)
        path = self.folder / f"{stem}.gguf"
        if not path.exists():
            write_tiny_gguf(path, context_length, n_layers=n_layers, instruct=instruct)
        return path

    def setup(self, stem: str) -> _ModelSetup:
        return self._setup.setdefault(stem, _ModelSetup())

    def script(self, stem: str) -> Script:
        return self.setup(stem).script

    def backend(self, stem: str) -> FakeBackend:
        """The newest backend built for that model file."""
        return next(b for b in reversed(self.built) if b.path.stem == stem)

    def __call__(self, path, params: LoadParams, debug: bool = False) -> FakeBackend:
        stem = Path(path).stem
        setup = self.setup(stem)
        self.loads.append((stem, params))
        backend = FakeBackend(path, params, debug, script=setup.script, **(self.defaults | setup.options))
        self.built.append(backend)
        return backend


# ---- fixtures (import them into a test module to use them)

MIB = 1024 * 1024
VRAM_MB = 64  # the GPU tier's budget in these tests: a tiny model fits whole


class FakeGPU:
    """A scripted machine for `ModelManager(devices=...)`: one GPU "FakeGPU0" whose free memory a
    test can change between loads (another app taking VRAM); `gpu=False` is a machine without one."""

    def __init__(self, free_mb: float = 8192, total_mb: float = 8192, gpu: bool = True,
                 skipped: tuple[tuple[str, str], ...] = ()):
        self.free_mb, self.total_mb, self.gpu, self.skipped = free_mb, total_mb, gpu, skipped

    def __call__(self) -> DeviceSnapshot:
        gpus = ()
        if self.gpu:
            total, free = int(self.total_mb * MIB), int(self.free_mb * MIB)
            gpus = (GPUInfo(0, "Fake GPU", "", total, free, total - free, backend="fake", device="FakeGPU0",
                            memory_from="ggml"),)
        return DeviceSnapshot(timestamp=time.time(), cpu_logical=2, cpu_physical=2, ram_total_bytes=8 << 30,
                              ram_available_bytes=6 << 30, process_rss_bytes=1 << 27, gpus=gpus,
                              gpu_backend="fake" if gpus else "none", backends=("cpu", "fake") if gpus else ("cpu",),
                              skipped=self.skipped,
                              note="" if gpus else "; ".join(f"{b} backend not loaded: {r}" for b, r in self.skipped))


@pytest.fixture
def fakes(tmp_path) -> FakeModels:
    folder = tmp_path / "models"
    folder.mkdir()
    return FakeModels(folder)


@pytest.fixture
def make_assistant(fakes):
    """Build `Assistant`s on fake backends (a real Database in the test's ASSISTANT_HOME); all
    closed at teardown. Prompt pieces are 32 tokens (n_batch), so Stop and pre-emption points are
    exact."""
    built = []

    def make(model: str | None = None, *, tiers: dict | None = None, n_ctx: int = 4096,
             vram_budget_mb: float | None = VRAM_MB, devices: FakeGPU | None = None,
             n_gpu_layers: int | None = None, n_ctx_max: int | None = None, **kwargs) -> Assistant:
        manager = ModelManager(budget_bytes=1 << 30, params=LoadParams(n_ctx=n_ctx, n_batch=32, n_threads=1),
                               vram_budget_mb=vram_budget_mb, backend_factory=fakes, devices=devices or FakeGPU(),
                               n_gpu_layers=n_gpu_layers, n_ctx_max=n_ctx_max)
        db = Database(db_path())
        try:
            collaborators = {k: kwargs.pop(k) for k in ("memory", "docs", "catalog") if k in kwargs}
            a = Assistant(db, EngineConfig(model=model, tiers=tiers, **kwargs), manager=manager, **collaborators)
        except BaseException:
            manager.close()
            db.close()
            raise
        built.append(a)
        return a

    yield make
    for a in built:
        a.close()
        a.db.close()


def wait_until(predicate, timeout: float = 5.0) -> None:
    """Poll `predicate` until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def send(assistant: Assistant, cid: int, text: str, max_tokens: int = 64, **kwargs) -> list:
    """Every event of one turn (chunks and TurnDones), in order."""
    return list(assistant.send(cid, text, GenerateParams(max_tokens=max_tokens), **kwargs))


def dones(events: list) -> list[TurnDone]:
    return [e for e in events if isinstance(e, TurnDone)]
