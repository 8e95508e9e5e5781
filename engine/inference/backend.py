"""`Backend`: one loaded GGUF model with one context: tokenize, evaluate, sample, save and restore.

It talks to llama.cpp only through engine/inference/llama_seam.py (the one module that imports
llama_cpp) and keeps the one count of what the context holds: the exact token ids in the KV cache
(sequence 0), so callers can diff a prompt against it and evaluate only what differs. Importing
this module loads nothing; the first model load does (llama_seam.init()).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from engine.config.ownership import adopt, owned
from engine.config.paths import user_dir
from engine.inference import llama_seam as llama
from engine.inference.cpu_facts import LoadMeter, cpu_facts
from engine.inference.errors import ContextFull, DecodeError, ModelLoadError
from engine.inference.backend_load import ABORT_WATCH_THREAD  # noqa: F401 - tests name the watch's thread
from engine.inference.backend_load import AbortWatch as _AbortWatch, load as _load
from engine.inference.load_log import parse_memory_report
from engine.inference.media import Pixels, next_run
from engine.inference.positions import Positions
from engine.inference.placement import NoSuchDevice, device_list, offload_facts
from engine.inference.thread_calibration import FILE as CALIBRATION_FILE, STORE, measure
from engine.inference.thread_policy import ThreadPolicy, ThreadState
from engine.inference.vision import Vision
from engine.inference.vocab import VocabTokenizer, model_identity
from engine.models.gguf_info import GGUFError, read_gguf

log = logging.getLogger(__name__)


def llama_version() -> str:
    """llama-cpp-python's version (loads llama.cpp if nothing has yet)."""
    return llama.version()


@dataclass(frozen=True)
class LoadParams:
    n_ctx: int = 4096
    n_threads: int | None = None  # None = calibrated per model, fewer while other programs are busy
    n_batch: int = 512
    n_gpu_layers: int = 0
    # ggml device for the offloaded layers ("Vulkan0", "CUDA0"); None = the best real GPU (as the
    # planner's "auto"). With n_gpu_layers 0 no device is used at all, not even for big batches.
    gpu_device: str | None = None
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = False
    swa_full: bool = False


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    seed: int | None = None


def _check(params: LoadParams) -> None:
    for name in (params.type_k, params.type_v):
        if name not in llama.KV_CACHE_TYPES:
            raise ModelLoadError(f"unsupported KV cache type '{name}' (use one of {', '.join(llama.KV_CACHE_TYPES)})")
    if params.type_v != "f16" and not params.flash_attn:
        raise ModelLoadError("a quantised V cache needs flash attention in llama.cpp (set flash_attn)")


class Backend:
    """One loaded GGUF model with one context.

    Its context, KV cache, sampler and token caches belong to one thread (engine/config/ownership.py): the
    thread that built it, until it hands it over (a model's thread takes it from the loader). The
    owned methods below raise WrongThread from any other thread while the check is on. Its facts
    (path, params, identity, n_ctx, bos_id, ...) are plain values any thread may read, and `vocab`
    is a tokenizer of its own (the vocabulary alone) for every other thread.

    Args:
        path: the .gguf file.
        params: load parameters.
        debug: let llama.cpp's own log through.

    Raises:
        ModelLoadError: missing, non-GGUF, truncated or unsupported file, or llama.cpp refused it.
    """

    def __init__(self, path: str | Path, params: LoadParams = LoadParams(), debug: bool = False):
        adopt(self)
        meter = LoadMeter()  # from here: its first reading spans the load, so the first prompt can act on it
        self.path = Path(path)
        self.params = params
        try:
            self.gguf = read_gguf(self.path)
        except GGUFError as exc:
            raise ModelLoadError(str(exc)) from exc
        _check(params)
        try:
            devices = device_list(params.n_gpu_layers, params.gpu_device)
        except NoSuchDevice as exc:
            raise ModelLoadError(str(exc)) from exc
        self._model, self._ctx, load_log = _load(self.path, params, devices, self.gguf.arch, debug)
        self._memory_report = parse_memory_report(load_log)
        self._memory_report["model_size_bytes"] = self._model.size_bytes()
        self.offload = offload_facts(self._memory_report, params.gpu_device,
                                     int(self.gguf.arch_value("block_count", 0) or 0) + 1)
        self._on_device = self.offload["n_gpu_layers"] > 0
        self._vocab = self._model.vocab
        facts = llama.vocab_facts(self._vocab)
        self.n_ctx = self._ctx.n_ctx()  # a fact fixed at load: read by any thread without the context
        self.n_vocab, self.bos_id, self.eos_id = facts["n_vocab"], facts["bos_id"], facts["eos_id"]
        self.add_bos = facts["add_bos"]
        self.n_swa = self._model.n_swa()
        # Other threads tokenize with this (the read-only vocabulary, caches and a lock of its own),
        # never with this backend, whose context and caches are its owner's.
        self.vocab = VocabTokenizer.of_model(self.path, self._model)
        self._kv: list[int] = []  # exact ids in the KV cache, seq 0, positions 0..n-1: the one count
        self.vision: Vision | None = None  # images, once a projector is loaded (load_projector)
        self._positions: Positions | None = None  # under M-RoPE only (load_projector)
        self._control_cache: dict[str, list[int]] = {}  # the owner's: other threads use `vocab`
        self._piece_cache: dict[int, bytes] = {}
        self._lse_buf = np.empty(self.n_vocab, dtype=np.float32)
        self._softmax_sum = llama.softmax_sum()
        self.identity = model_identity(self.path)
        self._policy: ThreadPolicy | None = None
        self._policy = self._thread_policy(meter)
        self.threads: ThreadState = self._policy.state  # replaced whole on a change: any thread reads it
        log.info("loaded %s (n_ctx=%d, swa=%d, %s)", self.path.name, self.n_ctx, self.n_swa, self.threads.describe())

    CALIBRATION_MIN_CTX = 32  # a context too small to calibrate in runs one thread per core

    def _thread_policy(self, meter: LoadMeter) -> ThreadPolicy:
        """A manual count as it is; else the quiet machine's best counts for this model (measured now,
        once per model and machine: engine/inference/thread_calibration.py) and the policy that
        lowers them while other programs compete (engine/inference/thread_policy.py)."""
        cpu, name = cpu_facts(), self.path.name
        if self.params.n_threads:
            n = self.params.n_threads
            return ThreadPolicy(n, n, cpu.usable, meter, time.monotonic, manual=True, name=name)
        def unmeasured() -> ThreadPolicy:
            self._ctx.set_threads(cpu.top, cpu.top)
            return ThreadPolicy(cpu.top, cpu.top, cpu.usable, meter, time.monotonic, reason="default", name=name)

        if self.n_ctx < self.CALIBRATION_MIN_CTX:
            return unmeasured()
        key = "|".join((self.identity, cpu.name, str(cpu.usable), str(self.offload["n_gpu_layers"]), llama.version()))
        path = user_dir() / CALIBRATION_FILE
        cal = STORE.get(path, key)
        if cal is None:
            try:
                cal = measure(self._ctx.set_threads, self.eval, self.reset, cpu, meter, token=max(self.bos_id, 0))
            except (DecodeError, ContextFull) as exc:  # a model that loaded must not fail on its timing
                log.warning("could not calibrate %s (%s): one thread per core", name, exc)
                self.reset()
                return unmeasured()
            STORE.put(path, key, cal)
            log.info("calibrated %s in %.2f s: decode %s tok/s, prompt %s tok/s by threads", name, cal.seconds,
                     {n: round(r) for n, r in cal.decode.items()}, {n: round(r) for n, r in cal.batch.items()})
        self._ctx.set_threads(cal.best_decode, cal.best_batch)
        return ThreadPolicy(cal.best_decode, cal.best_batch, cpu.usable, meter, time.monotonic, name=name)

    # ---- facts
    @property
    def memory_report(self) -> dict:
        """What llama.cpp allocated at load: bytes by kind ("weights", "kv", "compute", "output") and
        buffer type (e.g. {"CPU_Mapped": ..., "CUDA0": ...}), their totals ("kv_bytes", ...), the
        KV caches' cells/layers/types, and "model_size_bytes" (Σ tensor bytes, exact)."""
        return dict(self._memory_report)

    @property
    def arch(self) -> str:
        return self.gguf.arch

    @property
    def chat_template_source(self) -> str | None:
        return self.gguf.chat_template

    @owned
    def token_text(self, token: int) -> str:
        return llama.token_text(self._vocab, token)

    @owned
    def is_eog(self, token: int) -> bool:
        return llama.is_eog(self._vocab, token)

    # ---- tokens
    @owned
    def tokenize(self, text: str, special: bool) -> list[int]:
        """Tokenize without adding BOS. `special=False` treats control-token text as plain text."""
        return llama.tokenize(self._vocab, text.encode("utf-8", errors="replace"), special)

    @owned
    def tokenize_control(self, text: str) -> list[int]:
        """Tokenize template control text (special tokens parsed); cached, the same few strings recur."""
        ids = self._control_cache.get(text)
        if ids is None:
            ids = self._control_cache[text] = self.tokenize(text, special=True)
        return ids

    @owned
    def token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for (control tokens render empty); may be a partial UTF-8 char."""
        piece = self._piece_cache.get(token)
        if piece is None:
            piece = self._piece_cache[token] = llama.token_piece(self._vocab, token)
        return piece

    @owned
    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    @owned
    def load_projector(self, path: str | Path) -> None:
        """Load a vision projector (mmproj) beside the model: prompts may then hold images. On the
        GPU where the model's layers are."""
        if self.vision is None:
            self.vision = Vision(self._model, path, n_threads=self.threads.batch, use_gpu=self._on_device)
            if self.vision.mrope and self._kv:
                self.reset()  # its positions were counted one per id: start again under M-RoPE
            self._positions = Positions() if self.vision.mrope else None

    @owned
    def tokenize_images(self, text: str, images: list[Pixels], special: bool = False) -> list[int]:
        """`text` with one `vision.marker` per image into ids, each image tile a media span;
        `special` as in `tokenize`."""
        if self.vision is None:
            raise DecodeError("this model has no projector (mmproj) loaded: it cannot read images")
        return self.vision.tokenize(text, images, special)

    # ---- KV cache
    @property
    @owned
    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    @property
    @owned
    def n_kv(self) -> int:
        """How many ids the KV cache holds (len(kv_tokens), without the copy)."""
        return len(self._kv)

    @owned
    def reset(self) -> None:
        self._ctx.clear()
        self._kv.clear()
        if self._positions is not None:
            self._positions.clear()

    def _pos(self, n: int | None = None) -> int:
        """The position after the first n ids of the cache (default: all): n itself, except under
        M-RoPE, where an image takes fewer positions than ids (engine/inference/positions.py)."""
        n = len(self._kv) if n is None else n
        return n if self._positions is None else self._positions.at(n)

    @owned
    def keep_prefix(self, n: int) -> bool:
        """Drop KV entries from position n on. Returns False (and clears) when the cache cannot
        roll back to n, e.g. sliding-window layers have already forgotten tokens before n."""
        if n >= len(self._kv):
            return True
        # Same rule as llama.cpp's server: SWA cells before n - n_swa may be gone.
        threshold = max(0, n - self.n_swa) if self.n_swa > 0 and not self.params.swa_full else 0
        if n == 0 or self._ctx.pos_min() > self._pos(threshold) or not self._ctx.remove(self._pos(n)):
            self.reset()
            return n == 0
        del self._kv[n:]
        if self._positions is not None:
            self._positions.cut(n)
        return True

    @owned
    def shift_out(self, n_keep: int, n_discard: int) -> bool:
        """Remove KV positions [n_keep, n_keep + n_discard) and slide the rest down (RoPE shift),
        so a window that dropped its oldest turns keeps the rest without re-evaluation.
        Returns False (cache untouched) where llama.cpp cannot shift this cache (e.g. SWA)."""
        if n_discard <= 0 or n_keep + n_discard > len(self._kv):
            return False
        if self.n_swa > 0 or self._positions is not None or not self._ctx.can_shift():
            # sliding-window layers have no cells to shift back into the window; M-RoPE images
            # have positions in three sections, which a plain shift would not move as one
            return False
        if not self._ctx.remove(n_keep, n_keep + n_discard):
            return False
        self._ctx.shift(n_keep + n_discard, -1, -n_discard)
        del self._kv[n_keep:n_keep + n_discard]
        return True

    @owned
    def save_sequence(self) -> tuple[bytearray, list[int]]:
        """Sequence 0's KV state (llama.cpp's per-sequence state: the cache cells only, no logits)
        and its token ids. One copy, straight into the returned buffer."""
        return self._ctx.save_state(), list(self._kv)

    @owned
    def restore_sequence(self, saved: tuple[bytes | bytearray, list[int]]) -> bool:
        """Put back what `save_sequence` took; False (and a cleared cache) if llama.cpp refuses it.
        A bytearray is read in place (no copy)."""
        data, tokens = saved
        self.reset()
        if not tokens:
            return True
        if len(tokens) > self.n_ctx:
            return False
        if not self._ctx.load_state(data):
            self.reset()
            return False
        if self._positions is not None and not self._positions.rebuild(tokens, self.vision.n_pos):
            self.reset()  # an image of it was not tokenized here yet: evaluated again instead
            return False
        self._kv[:] = tokens
        return True

    @property
    def abortable(self) -> bool:
        """Stop can end a decode midway: llama.cpp's CPU backend checks between graph nodes (a GPU
        backend does not). A prompt then goes in whole n_batch pieces, as fast as bare llama.cpp
        reads it, and Stop still acts within milliseconds (engine/inference/runtime.py)."""
        return not self._on_device

    @owned
    def eval(self, tokens: list[int], piece: int | None = None, stop: Callable[[], bool] | None = None) -> int:
        """Evaluate tokens after the current KV contents, `piece` tokens per decode (default n_batch).

        `stop()` is asked between pieces, and, where the backend is `abortable`, every
        ABORT_POLL_S during one (from the thread ABORT_WATCH_THREAD): a true answer leaves the rest
        unevaluated, so Stop and pre-emption never wait for a whole prompt. `kv_tokens` then holds
        exactly what was evaluated (an aborted piece is dropped whole); a decode that fails leaves
        it (and the cache) at the last whole piece.

        Returns:
            How many of `tokens` were evaluated (all of them unless `stop` said so).
        """
        if len(self._kv) + len(tokens) > self.n_ctx:
            raise ContextFull(len(self._kv) + len(tokens), self.n_ctx)
        step = max(1, min(piece or self._ctx.n_batch, self._ctx.n_batch))
        watch = _AbortWatch(self._ctx, stop) if stop is not None and self.abortable and len(tokens) > 1 else None
        done = 0
        try:
            while done < len(tokens):
                if stop is not None and stop():
                    break
                self._steer()
                part = tokens[done:next_run(tokens, done, step)]
                try:
                    if part[0] < 0:  # an image (engine/inference/media.py): its embeddings
                        self._image(part)
                    else:
                        self._ctx.decode(part, self._pos())
                    # On a GPU llama_decode only queues the work; it runs until the next logits read.
                    # Wait for it here, so a piece is a piece of work (Stop and pre-emption act between
                    # pieces, not after everything queued) and prompt timings measure the evaluation.
                    if self._on_device:
                        self._ctx.synchronize()
                except llama.DecodeAborted:
                    self._resync()
                    break
                except llama.DecodeFailed as exc:
                    self._resync()
                    raise DecodeError(f"llama.cpp could not evaluate the tokens ({exc})") from exc
                except BaseException:
                    self._resync()
                    raise
                self._advance(part)
                done += len(part)
        finally:
            if watch is not None:
                watch.close()
            if self._policy is not None:
                self._policy.end()
        return done

    @owned
    def eval_rows(self, tokens: list[int], rows_from: int) -> None:
        """Evaluate `tokens` (≤ n_batch) in one decode, logits for every token from index `rows_from`
        on: a draft verified in one pass, each row sampled by `sample(sampler, row)`. Stop waits
        for it: a pass is kept short (engine/inference/speculation.py PASS_S).

        Raises:
            ContextFull, DecodeError: as `eval`; nothing of `tokens` is then in the cache."""
        if len(self._kv) + len(tokens) > self.n_ctx:
            raise ContextFull(len(self._kv) + len(tokens), self.n_ctx)
        if len(tokens) > self._ctx.n_batch:
            raise ValueError(f"{len(tokens)} tokens in one decode; the batch holds {self._ctx.n_batch}")
        self._steer()
        try:
            self._ctx.decode(tokens, self._pos(), rows_from)
        except llama.DecodeFailed as exc:
            self._resync()
            raise DecodeError(f"llama.cpp could not evaluate the tokens ({exc})") from exc
        except BaseException:
            self._resync()
            raise
        finally:
            if self._policy is not None:
                self._policy.end()
        self._advance(tokens)

    def _advance(self, part: list[int]) -> None:
        """`part` is in the cache now: its ids, and under M-RoPE their positions."""
        if self._positions is not None:
            if part[0] < 0:
                self._positions.add_span(len(part), self.vision.n_pos(part[0]))
            else:
                self._positions.add_text(len(part))
        self._kv.extend(part)

    def _image(self, span: list[int]) -> None:
        if self.vision is None:
            raise DecodeError("the prompt holds an image and this model has no projector (mmproj) loaded")
        self.vision.decode(self._ctx, span, self._pos())

    def _steer(self) -> None:
        # Between pieces, never inside one: the thread counts apply from the next llama_decode.
        if self._policy is None:  # calibrating
            return
        change = self._policy.begin()
        if change is not None:
            self._ctx.set_threads(change.decode, change.batch)
        self.threads = self._policy.state  # with the load it last read, for the gauges

    def _resync(self) -> None:
        # A decode failed part-way: drop whatever llama.cpp kept past the ids we know are there.
        self._ctx.remove(self._pos())

    # ---- sampling
    @owned
    def make_sampler(self, p: SamplingParams, grammar: str | None = None) -> llama.Sampler:
        """A sampler for one answer; `grammar` (GBNF) constrains what it may pick."""
        seed = p.seed if p.seed is not None else int.from_bytes(os.urandom(4), "little")
        constraint = llama.Grammar(self._model, grammar) if grammar else None
        return llama.Sampler(self._ctx, self.n_vocab, temperature=p.temperature, top_k=p.top_k, top_p=p.top_p,
                             min_p=p.min_p, repeat_penalty=p.repeat_penalty, seed=seed, grammar=constraint)

    @owned
    def constrain(self, sampler: llama.Sampler, grammar: str | None, written: list[int] = ()) -> bool:
        """Swap `sampler`'s grammar mid-answer (None: free text again): a lazy grammar that starts
        at a marker (engine/inference/tool_calls.py). `written`: tokens already sampled that it must
        take first (text past the marker inside the marker's last token). False, and no grammar,
        when it does not allow them."""
        if sampler.grammar is not None:
            sampler.grammar.close()
            sampler.grammar = None
        if grammar is None:
            return True
        constraint = llama.Grammar(self._model, grammar)
        for token in written:
            if not constraint.allows(token, 0.0):
                constraint.close()
                return False
            constraint.accept(token)
        sampler.grammar = constraint
        return True

    @owned
    def sample(self, sampler: llama.Sampler, row: int = -1) -> tuple[int, float]:
        """Sample the next token from the last decode's token `row` (-1: the last evaluated); return
        (token, its log-probability under the model's raw distribution). Only that logits row is
        read: no logits_all."""
        token = sampler.sample(row)
        ptr = self._ctx.logits(row)
        row = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        peak = float(row.max())
        buf = self._lse_buf
        if self._softmax_sum is not None:
            total = self._softmax_sum(self.n_vocab, buf.ctypes.data, row.ctypes.data, peak)
        else:
            np.subtract(row, peak, out=buf)
            np.exp(buf, out=buf)
            total = float(buf.sum(dtype=np.float64))
        return token, float(row[token]) - peak - math.log(total)

    @owned
    def first_logits(self) -> np.ndarray:
        """A copy of the last evaluated position's logits (for equivalence checks)."""
        return np.ctypeslib.as_array(self._ctx.last_logits(), shape=(self.n_vocab,)).copy()

    @owned
    def close(self) -> None:
        self.vocab.close()  # first: it waits for a call in progress on another thread, then refuses more
        if self.vision is not None:
            self.vision.close()  # its chunks, then the projector: before the model it reads
        self._model.close()  # its context first, then the weights
