"""The only module that imports llama_cpp: load a GGUF, tokenize, evaluate, sample, state.

`Backend` owns one `Llama` (model + context). It mirrors the exact token ids held in the
context's KV cache (sequence 0) so callers can diff a prompt against it and evaluate only
what differs.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

# ggml's crash handler runs gdb when it finds one and prints its output to stdout, into the CLI's
# JSON lines; a crash must say what it says on stderr only.
os.environ.setdefault("GGML_NO_BACKTRACE", "1")

from engine.models.ggml_registry import registry  # noqa: E402

# ggml's backend modules are loaded before llama_cpp is imported (which would load them too, but
# quietly): the registry keeps ggml's reasons for a GPU backend it skipped (no Vulkan loader, no driver).
registry().load()

import llama_cpp  # noqa: E402 - after the environment it reads
from llama_cpp import Llama  # noqa: E402
from llama_cpp import _logger as llama_logger  # noqa: E402
from llama_cpp import llama_cpp as _LLAMA_C  # noqa: E402 - the ctypes module Llama() calls into

from engine.inference.load_log import device_out_of_memory, parse_memory_report  # noqa: E402
from engine.config.ownership import adopt, owned  # noqa: E402
from engine.inference.placement import NoSuchDevice, device_list, model_devices, offload_facts  # noqa: E402
from engine.models.gguf_info import GGUFError, read_gguf  # noqa: E402

log = logging.getLogger(__name__)

CACHE_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}
LLAMA_CPP_VERSION = llama_cpp.__version__


class ModelLoadError(RuntimeError):
    """A model file could not be loaded; the message is meant for the user."""


class DeviceMemoryError(ModelLoadError):
    """The GPU could not hold what the load asked for (llama.cpp failed to allocate a device buffer);
    a load with fewer layers or on the CPU may work."""


class DecodeError(RuntimeError):
    """llama.cpp failed to evaluate tokens (out of memory on the device, a backend error); the KV
    bookkeeping was resynced to what it holds."""


@dataclass(frozen=True)
class LoadParams:
    n_ctx: int = 4096
    n_threads: int | None = None  # None = all cores
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


def _ggml_softmax_sum():
    """ggml's SIMD `ggml_vec_soft_max_f32` (returns Σ exp(x - max)), or None if not exported.

    numpy's exp over a 262k vocabulary costs ~650 µs a token here; ggml's takes ~200 µs, which keeps
    the per-token logprob within the decode-speed budget. It lives in the CPU backend: the variant
    ggml loaded for this processor (libggml-cpu-haswell.so, ...), or libggml-cpu in a static build.
    """
    cpu = registry().cpu_module()
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    candidates = [cpu] if cpu else []
    candidates += [lib_dir / name for name in ("libggml-cpu.so", "libggml-cpu.dylib", "ggml-cpu.dll")]
    for path in candidates:
        try:
            fn = ctypes.CDLL(str(path)).ggml_vec_soft_max_f32
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_double
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float]
        return fn
    return None


_SOFTMAX_SUM = _ggml_softmax_sum()


# ---- load-time log capture ----------------------------------------------------------------------
# llama.cpp states what it allocated only in its log (engine/inference/load_log.py reads it). While
# a model loads, a temporary log callback records the lines and hands every line on to
# llama-cpp-python's own callback, so what reaches stderr does not change.
_LOG_CAPTURE_LOCK = threading.Lock()  # llama_log_set is process-wide: one capture at a time


class _LoadLogCapture:
    def __enter__(self) -> "_LoadLogCapture":
        _LOG_CAPTURE_LOCK.acquire()
        self.parts: list[str] = []

        @llama_cpp.llama_log_callback
        def on_log(level, text, user_data):
            try:
                self.parts.append(text.decode("utf-8", errors="replace"))
            finally:
                llama_logger.llama_log_callback(level, text, user_data)

        self._callback = on_log  # ctypes must keep it alive while llama.cpp holds the pointer
        llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
        return self

    def __exit__(self, *exc) -> None:
        llama_cpp.llama_log_set(llama_logger.llama_log_callback, ctypes.c_void_p(0))
        _LOG_CAPTURE_LOCK.release()


def _quiet_llama_logs(debug: bool) -> None:
    # llama.cpp prints its own log lines to stderr; keep them for debug runs only.
    llama_logger.logger.setLevel(logging.DEBUG if debug else logging.CRITICAL)


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
        self.path = Path(path)
        self.params = params
        try:
            self.gguf = read_gguf(self.path)
        except GGUFError as exc:
            raise ModelLoadError(str(exc)) from exc
        for name in (params.type_k, params.type_v):
            if name not in CACHE_TYPES:
                raise ModelLoadError(f"unsupported KV cache type '{name}' (use one of {', '.join(CACHE_TYPES)})")
        if params.type_v != "f16" and not params.flash_attn:
            raise ModelLoadError("a quantised V cache needs flash attention in llama.cpp (set flash_attn)")
        n_threads = params.n_threads or os.cpu_count() or 1
        try:
            devices = device_list(params.n_gpu_layers, params.gpu_device)
        except NoSuchDevice as exc:
            raise ModelLoadError(str(exc)) from exc
        try:
            with _LoadLogCapture() as captured, model_devices(_LLAMA_C, devices):
                self._llama = Llama(
                    model_path=str(self.path), n_ctx=params.n_ctx, n_batch=params.n_batch,
                    n_ubatch=params.n_batch, n_threads=n_threads, n_threads_batch=n_threads,
                    n_gpu_layers=params.n_gpu_layers, type_k=CACHE_TYPES[params.type_k],
                    type_v=CACHE_TYPES[params.type_v], flash_attn=params.flash_attn,
                    swa_full=params.swa_full, verbose=debug,
                    # A CPU plan keeps work off any device: llama.cpp would otherwise copy weights to
                    # a GPU for each big batch (a 374-token prompt: 49 s on a software Vulkan device).
                    op_offload=params.n_gpu_layers > 0,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            text = "".join(captured.parts)
            if params.n_gpu_layers > 0 and device_out_of_memory(text):
                raise DeviceMemoryError(
                    f"the GPU ({params.gpu_device or 'default device'}) could not hold {self.path.name} with "
                    f"{params.n_gpu_layers} layers and a {params.n_ctx}-token context: out of device memory"
                ) from exc
            arch = self.gguf.arch or "unknown"
            where = f" on {params.gpu_device or 'the GPU'}" if params.n_gpu_layers > 0 else ""
            raise ModelLoadError(
                f"llama.cpp could not load {self.path.name} (architecture '{arch}'){where}: the file may be "
                f"damaged or of an architecture this llama.cpp ({LLAMA_CPP_VERSION}) does not support"
            ) from exc
        _quiet_llama_logs(debug)  # Llama() resets the level to ERROR; errors are ours to report
        model = self._llama._model.model
        self._memory_report = parse_memory_report("".join(captured.parts))
        self._memory_report["model_size_bytes"] = int(llama_cpp.llama_model_size(model))  # Σ tensor bytes, exact
        self.offload = offload_facts(self._memory_report, params.gpu_device,
                                     int(self.gguf.arch_value("block_count", 0) or 0) + 1)
        self._on_device = self.offload["n_gpu_layers"] > 0
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self._ctx = self._llama._ctx
        self.n_ctx = self._llama.n_ctx()  # a fact fixed at load: read by any thread without the context
        self.n_vocab = self._llama.n_vocab()
        self.n_swa = int(llama_cpp.llama_model_n_swa(model))
        self.bos_id = self._llama.token_bos()
        self.eos_id = self._llama.token_eos()
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        # Other threads tokenize with this (the read-only vocabulary, caches and a lock of its own),
        # never with this backend, whose context and caches are its owner's.
        self.vocab = VocabTokenizer.of_model(self.path, self._vocab)
        self._kv: list[int] = []  # exact ids in the KV cache, seq 0, positions 0..n-1
        self._control_cache: dict[str, list[int]] = {}  # the owner's: other threads use `vocab`
        self._piece_cache: dict[int, bytes] = {}
        self._lse_buf = np.empty(self.n_vocab, dtype=np.float32)
        self.identity = model_identity(self.path)
        log.info("loaded %s (n_ctx=%d, swa=%d)", self.path.name, self.n_ctx, self.n_swa)

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
        return self._llama._model.token_get_text(token)

    @owned
    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    # ---- tokens
    @owned
    def tokenize(self, text: str, special: bool) -> list[int]:
        """Tokenize without adding BOS. `special=False` treats control-token text as plain text."""
        if not text:
            return []
        return self._llama.tokenize(text.encode("utf-8", errors="replace"), add_bos=False, special=special)

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
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            if n < 0:  # buffer too small: -n is the size needed
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            piece = self._piece_cache[token] = buf.raw[:n]
        return piece

    @owned
    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    # ---- KV cache
    @property
    @owned
    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    @owned
    def reset(self) -> None:
        self._ctx.kv_cache_clear()
        self._llama.n_tokens = 0
        self._kv.clear()

    @owned
    def keep_prefix(self, n: int) -> bool:
        """Drop KV entries from position n on. Returns False (and clears) when the cache cannot
        roll back to n, e.g. sliding-window layers have already forgotten tokens before n."""
        if n >= len(self._kv):
            return True
        mem = llama_cpp.llama_get_memory(self._ctx.ctx)
        pos_min = llama_cpp.llama_memory_seq_pos_min(mem, 0)
        # Same rule as llama.cpp's server: SWA cells before n - n_swa may be gone.
        threshold = max(0, n - self.n_swa) if self.n_swa > 0 and not self.params.swa_full else 0
        if n == 0 or pos_min > threshold or not self._ctx.kv_cache_seq_rm(0, n, -1):
            self.reset()
            return n == 0
        self._llama.n_tokens = n
        del self._kv[n:]
        return True

    @owned
    def shift_out(self, n_keep: int, n_discard: int) -> bool:
        """Remove KV positions [n_keep, n_keep + n_discard) and slide the rest down (RoPE shift),
        so a window that dropped its oldest turns keeps the rest without re-evaluation.
        Returns False (cache untouched) where llama.cpp cannot shift this cache (e.g. SWA)."""
        if n_discard <= 0 or n_keep + n_discard > len(self._kv):
            return False
        mem = llama_cpp.llama_get_memory(self._ctx.ctx)
        if self.n_swa > 0 or not llama_cpp.llama_memory_can_shift(mem):
            return False  # sliding-window layers have no cells to shift back into the window
        if not llama_cpp.llama_memory_seq_rm(mem, 0, n_keep, n_keep + n_discard):
            return False
        llama_cpp.llama_memory_seq_add(mem, 0, n_keep + n_discard, -1, -n_discard)
        del self._kv[n_keep:n_keep + n_discard]
        self._llama.n_tokens = len(self._kv)
        return True

    @owned
    def save_sequence(self) -> tuple[bytearray, list[int]]:
        """Sequence 0's KV state (llama.cpp's per-sequence state: the cache cells only, no logits)
        and its token ids. One copy, straight into the returned buffer."""
        size = llama_cpp.llama_state_seq_get_size(self._ctx.ctx, 0)
        data = bytearray(size)
        view = (ctypes.c_uint8 * size).from_buffer(data)
        n = llama_cpp.llama_state_seq_get_data(self._ctx.ctx, view, size, 0)
        del view  # release the export before resizing
        del data[n:]
        return data, list(self._kv)

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
        if isinstance(data, bytearray):
            buf = (ctypes.c_uint8 * len(data)).from_buffer(data)
        else:
            buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        ok = llama_cpp.llama_state_seq_set_data(self._ctx.ctx, buf, len(data), 0) == len(data)
        del buf
        if not ok:
            self.reset()
            return False
        self._kv[:] = tokens
        self._llama.n_tokens = len(tokens)
        return True

    @owned
    def eval(self, tokens: list[int], piece: int | None = None, stop: Callable[[], bool] | None = None) -> int:
        """Evaluate tokens after the current KV contents, `piece` tokens per decode (default n_batch).

        `stop()` is asked between pieces: a true answer leaves the rest unevaluated, so Stop and
        pre-emption act within one piece, never after a whole prompt. `kv_tokens` then holds exactly
        what was evaluated; a decode that fails leaves it (and the cache) at the last whole piece.

        Returns:
            How many of `tokens` were evaluated (all of them unless `stop` said so).
        """
        if len(self._kv) + len(tokens) > self.n_ctx:
            raise ContextFull(len(self._kv) + len(tokens), self.n_ctx)
        step = max(1, min(piece or self.params.n_batch, self.params.n_batch))
        done = 0
        while done < len(tokens):
            if stop is not None and stop():
                break
            part = tokens[done:done + step]
            try:
                self._llama.eval(part)
                # On a GPU llama_decode only queues the work; it runs until the next logits read.
                # Wait for it here, so a piece is a piece of work (Stop and pre-emption act between
                # pieces, not after everything queued) and prompt timings measure the evaluation.
                if self._on_device:
                    llama_cpp.llama_synchronize(self._ctx.ctx)
            except RuntimeError as exc:  # llama_cpp's "llama_decode returned N"
                self._resync()
                raise DecodeError(f"llama.cpp could not evaluate the tokens ({exc})") from exc
            except BaseException:
                self._resync()
                raise
            self._kv.extend(part)
            done += len(part)
        return done

    def _resync(self) -> None:
        # A decode failed part-way: drop whatever llama.cpp kept past the ids we know are there.
        n = len(self._kv)
        self._ctx.kv_cache_seq_rm(-1, n, -1)
        self._llama.n_tokens = n

    # ---- sampling
    @owned
    def make_sampler(self, p: SamplingParams):
        if p.seed is not None:
            self._llama.set_seed(p.seed)
        else:
            self._llama.set_seed(int.from_bytes(os.urandom(4), "little"))
        return self._llama._init_sampler(
            top_k=p.top_k, top_p=p.top_p, min_p=p.min_p, temp=p.temperature, repeat_penalty=p.repeat_penalty,
        )

    @owned
    def sample(self, sampler) -> tuple[int, float]:
        """Sample the next token from the last evaluated position; return (token, its log-probability
        under the model's raw distribution). Only the last logits row is read: no logits_all."""
        token = sampler.sample(self._ctx, -1)
        ptr = llama_cpp.llama_get_logits_ith(self._ctx.ctx, -1)
        row = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        peak = float(row.max())
        buf = self._lse_buf
        if _SOFTMAX_SUM is not None:
            total = _SOFTMAX_SUM(self.n_vocab, buf.ctypes.data, ctypes.cast(ptr, ctypes.c_void_p).value, peak)
        else:
            np.subtract(row, peak, out=buf)
            np.exp(buf, out=buf)
            total = float(buf.sum(dtype=np.float64))
        return token, float(row[token]) - peak - math.log(total)

    @owned
    def first_logits(self) -> np.ndarray:
        """A copy of the last evaluated position's logits (for equivalence checks)."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx.ctx, -1), shape=(self.n_vocab,)).copy()

    @owned
    def close(self) -> None:
        self.vocab.close()  # first: it waits for a call in progress on another thread, then refuses more
        self._llama.close()


def model_identity(path: str | Path) -> str:
    """What a model's token ids are stored under: valid across processes for the same file, whose
    name and size identify it cheaply."""
    path = Path(path)
    return f"{path.name}:{path.stat().st_size}"


class VocabTokenizer:
    """A model's vocabulary alone (no weights, no context): exact tokens from any thread.

    It shares no state with a model's `Backend` (no context, no caches), so tokenizing never waits
    for, or races with, the model's own thread. Every call holds one lock: close() must not free
    the vocabulary under a call, and the caches are shared.

    `VocabTokenizer(path)` loads the GGUF's vocabulary alone (the GUI's token counter, before and
    across model loads): a few hundred ms for a 262k-token vocabulary, do it off the GUI thread.
    `Backend.vocab` is `of_model`: the loaded model's own `llama_vocab`, no second load (that
    doubled a demo model's load time). llama.cpp's model, vocabulary included, is read-only once
    loaded and made to be shared across threads (its contexts are not: those stay the model
    thread's); llama-server tokenizes on its HTTP threads while its loop decodes, the same way.

    Raises:
        ModelLoadError: the file cannot be read as a GGUF vocabulary.
    """

    def __init__(self, path: str | Path):
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        with _LoadLogCapture():  # keeps llama.cpp's load chatter off stdout/stderr
            model = llama_cpp.llama_model_load_from_file(str(Path(path)).encode("utf-8"), params)
        if not model:
            raise ModelLoadError(f"could not read the vocabulary of {Path(path).name}")
        self._setup(path, model, llama_cpp.llama_model_get_vocab(model))

    @classmethod
    def of_model(cls, path: str | Path, vocab) -> "VocabTokenizer":
        """The vocabulary of a model already loaded from `path` (its `llama_vocab`), not freed by
        close(): the model's owner closes this first, then frees the model."""
        self = cls.__new__(cls)
        self._setup(path, None, vocab)
        return self

    def _setup(self, path: str | Path, model, vocab) -> None:
        self.path = Path(path)
        self._model = model  # ours to free, or None: the vocabulary is a loaded model's
        self._vocab = vocab
        self._lock = threading.Lock()
        self.identity = model_identity(self.path)
        self.bos_id = int(llama_cpp.llama_vocab_bos(vocab))
        self.eos_id = int(llama_cpp.llama_vocab_eos(vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self._control_cache: dict[str, list[int]] = {}
        self._piece_cache: dict[int, bytes] = {}

    def _open(self):
        if self._vocab is None:
            raise ValueError("tokenizer closed")
        return self._vocab

    def count(self, text: str) -> int:
        """Tokens of `text` as message content (control-token text counts as plain text)."""
        data = text.encode("utf-8", errors="replace")
        if not data:
            return 0
        with self._lock:
            n = llama_cpp.llama_tokenize(self._open(), data, len(data), None, 0, False, False)
            return -n if n < 0 else n

    def tokenize(self, text: str, special: bool) -> list[int]:
        """As `Backend.tokenize`: no BOS added; `special=False` treats control-token text as plain text."""
        data = text.encode("utf-8", errors="replace")
        if not data:
            return []
        with self._lock:
            return self._tokenize(data, special)

    def _tokenize(self, data: bytes, special: bool) -> list[int]:
        size = len(data) + 1  # a token covers at least one byte
        while True:
            buf = (llama_cpp.llama_token * size)()
            n = llama_cpp.llama_tokenize(self._open(), data, len(data), buf, size, False, special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def tokenize_control(self, text: str) -> list[int]:
        """Template control text (special tokens parsed); cached, the same few strings recur."""
        with self._lock:
            ids = self._control_cache.get(text)
            if ids is None:
                data = text.encode("utf-8", errors="replace")
                ids = self._control_cache[text] = self._tokenize(data, True) if data else []
            return list(ids)

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for (control tokens render empty); may be a partial UTF-8 char."""
        with self._lock:
            piece = self._piece_cache.get(token)
            if piece is None:
                vocab = self._open()
                buf = ctypes.create_string_buffer(64)
                n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
                if n < 0:  # buffer too small: -n is the size needed
                    buf = ctypes.create_string_buffer(-n)
                    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
                piece = self._piece_cache[token] = buf.raw[:n]
            return piece

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        with self._lock:
            return bool(llama_cpp.llama_vocab_is_eog(self._open(), token))

    def close(self) -> None:
        with self._lock:
            if self._model:
                llama_cpp.llama_model_free(self._model)
            self._model = self._vocab = None


class ContextFull(RuntimeError):
    def __init__(self, needed: int, n_ctx: int):
        super().__init__(f"the conversation needs {needed} tokens but the context holds {n_ctx}")
        self.needed, self.n_ctx = needed, n_ctx
