"""The one seam to llama.cpp: the only module that imports llama_cpp.

It uses llama-cpp-python's public ctypes bindings of llama.h only (`llama_cpp.llama_*`, the
"low-level API"), never `Llama` or `llama_cpp._internals`: `Llama` keeps a token count of its own
(`n_tokens`) that the engine had to write behind its back, and `_internals` is private. What
`Llama` did for us (a model, a context, one batch, a sampler chain) is the few calls below, and
the token count is the engine's alone (`Backend.kv_tokens`). tests/test_llama_seam.py pins each
binding and struct field used here to its signature, so a wheel upgrade that changes one fails
there by name; an upgrade is this file and that test run.

Importing this module does nothing. `init()` (idempotent, thread-safe; every entry point calls it)
loads ggml's backends through engine/models/ggml_registry.py (ASSISTANT_CPU_VARIANT's CPU variant,
the GPU backends whose driver loads), then imports llama_cpp, whose patched loader would otherwise
load them quietly, and routes llama.cpp's log through `LoadLog` (engine/inference/load_log.py).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path

from engine.config.buffers import unfilled
from engine.inference import gbnf
from engine.inference.abort_flag import AbortFlag
from engine.inference.ggml_softmax import find_softmax_sum
from engine.models.ggml_registry import registry

KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")  # LoadParams.type_k / type_v names
_C = None  # the llama_cpp module, once init() has run
_init_lock = threading.Lock()
_log_callback = None  # ctypes must keep the callback alive while llama.cpp holds the pointer
_softmax_sum = None
_verbose = False
_capture: list[str] | None = None  # the lines of the LoadLog in progress
_capture_lock = threading.Lock()  # llama.cpp's log is process-wide: one capture at a time


class LoadFailed(RuntimeError):
    """llama.cpp refused a model file or a context (its log says why)."""


class DecodeFailed(RuntimeError):
    """llama_decode returned an error code (out of device memory, a backend error)."""


class DecodeAborted(DecodeFailed):  # Context.abort() stopped a llama_decode midway: the piece was dropped
    pass


def init() -> None:
    """Load ggml's backends, import llama_cpp and take over its log; once per process."""
    global _C, _log_callback, _softmax_sum
    if _C is not None:
        return
    with _init_lock:
        if _C is not None:
            return
        # Before llama_cpp's import, which would load them too but quietly: the registry keeps
        # ggml's reasons for a GPU backend it skipped (no Vulkan loader, no driver). It also sets
        # GGML_NO_BACKTRACE (a crash prints to stderr only, never into the CLI's JSON lines).
        registry().load()
        import llama_cpp

        llama_cpp.llama_backend_init()
        _log_callback = llama_cpp.llama_log_callback(_on_log)
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _softmax_sum = find_softmax_sum(Path(llama_cpp.__file__).parent / "lib")
        _C = llama_cpp


def mtmd():
    """llama.cpp's mtmd bindings (images: engine/inference/llama_vision.py), imported on first use:
    a process that never sees an image never loads libmtmd."""
    init()
    try:
        from llama_cpp import mtmd_cpp
    except (ImportError, OSError) as exc:  # a wheel built without LLAVA_BUILD has no libmtmd
        raise LoadFailed(f"this build of llama.cpp has no image support (libmtmd): {exc}") from exc
    return mtmd_cpp


def position(value: int = 0):
    """A llama_pos for an out-argument."""
    return _C.llama_pos(value)


def n_embd_inp(model: "Model") -> int:
    """The width of the model's input embeddings (what an image token must be)."""
    return int(_C.llama_model_n_embd_inp(model.ptr))


def version() -> str:
    """llama-cpp-python's version (stored with KV snapshots, named in load errors)."""
    init()
    return _C.__version__


def set_verbose(on: bool) -> None:
    """Let llama.cpp's own log lines through to stderr (debug runs), or keep them off it."""
    global _verbose
    _verbose = on


def _on_log(level: int, text: bytes | None, user_data) -> None:
    line = (text or b"").decode("utf-8", errors="replace")
    parts = _capture
    if parts is not None:
        parts.append(line)
    if _verbose:
        sys.stderr.write(line)
        sys.stderr.flush()


class LoadLog:
    """Records llama.cpp's log lines while a model loads: it states what it allocated only there."""

    def __enter__(self) -> "LoadLog":
        global _capture
        init()
        _capture_lock.acquire()
        self.parts: list[str] = []
        _capture = self.parts
        return self

    def __exit__(self, *exc) -> None:
        global _capture
        _capture = None
        _capture_lock.release()

    def text(self) -> str:
        return "".join(self.parts)


def softmax_sum():
    """`fn(n, out_ptr, logits_ptr, max) -> Σ exp(logit - max)` (ggml's), or None: use numpy."""
    init()
    return _softmax_sum


# ---- the model and its vocabulary ---------------------------------------------------------------
class Model:
    """A loaded llama_model (weights and vocabulary; `vocab_only` for the vocabulary alone).

    llama.cpp's model is read-only once loaded and may be read from any thread; its contexts may
    not. close() frees the contexts made from it first, then the model.
    """

    def __init__(self, path: str | Path, n_gpu_layers: int = 0, devices: list[int] | None = None,
                 vocab_only: bool = False, mmap: bool = True):
        init()
        params = _C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        # mmap: the file's pages shared and reclaimable; else the weights are read into the process
        params.load_mode = _C.LLAMA_LOAD_MODE_MMAP if mmap else _C.LLAMA_LOAD_MODE_NONE
        if devices is not None:  # [] keeps every layer and every big batch off all devices
            array = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)  # NULL-terminated, copied
            params.devices = ctypes.cast(array, ctypes.c_void_p)
        self.ptr = _C.llama_model_load_from_file(str(Path(path)).encode("utf-8"), params)
        if not self.ptr:
            raise LoadFailed(f"llama.cpp could not load {Path(path).name}")
        self.vocab = _C.llama_model_get_vocab(self.ptr)
        self._contexts: list[Context] = []

    def size_bytes(self) -> int:
        return int(_C.llama_model_size(self.ptr))  # Σ tensor bytes, exact

    def n_swa(self) -> int:
        return int(_C.llama_model_n_swa(self.ptr))

    def n_ctx_train(self) -> int:
        return int(_C.llama_model_n_ctx_train(self.ptr))

    def close(self) -> None:
        for ctx in reversed(self._contexts):
            ctx.close()
        self._contexts.clear()
        if self.ptr:
            _C.llama_model_free(self.ptr)
        self.ptr = self.vocab = None

    def __del__(self) -> None:
        if _C is not None and getattr(self, "ptr", None):
            self.close()


# A llama_vocab handle (Model.vocab) is read-only: these may run on any thread.
QUANT_TYPES = ("f16", "q8_0", "q4_0")


def quantize(source: Path | str, target: Path | str, kind: str, n_threads: int = 0) -> None:
    """Write `source` re-quantized as `kind` (QUANT_TYPES) to `target` with llama.cpp's quantizer
    (bench/speculative.py builds a draft pair from one file this way).

    Raises:
        LoadFailed: llama.cpp could not.
    """
    init()
    qp = _C.llama_model_quantize_default_params()
    qp.ftype = {"f16": _C.LLAMA_FTYPE_MOSTLY_F16, "q8_0": _C.LLAMA_FTYPE_MOSTLY_Q8_0,
                "q4_0": _C.LLAMA_FTYPE_MOSTLY_Q4_0}[kind]
    qp.allow_requantize, qp.nthread = True, n_threads
    if _C.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(qp)) != 0:
        raise LoadFailed(f"llama.cpp could not quantize {source} to {kind}")


def vocab_facts(vocab) -> dict:
    return {"n_vocab": int(_C.llama_vocab_n_tokens(vocab)), "bos_id": int(_C.llama_vocab_bos(vocab)),
            "eos_id": int(_C.llama_vocab_eos(vocab)), "add_bos": bool(_C.llama_vocab_get_add_bos(vocab))}


def tokenize(vocab, data: bytes, special: bool) -> list[int]:
    """Token ids of UTF-8 `data`, no BOS added; `special=False` reads control-token text as text."""
    if not data:
        return []
    size = len(data) + 1  # a token covers at least one byte
    while True:
        buf = (_C.llama_token * size)()
        n = _C.llama_tokenize(vocab, data, len(data), buf, size, False, special)
        if n >= 0:
            return list(buf[:n])
        size = -n


def count_tokens(vocab, data: bytes) -> int:
    """How many tokens `data` is as message content (control-token text counts as plain text)."""
    if not data:
        return 0
    n = _C.llama_tokenize(vocab, data, len(data), None, 0, False, False)
    return -n if n < 0 else n


def token_piece(vocab, token: int) -> bytes:
    """The bytes one token stands for (control tokens render empty); may be a partial UTF-8 char."""
    buf = ctypes.create_string_buffer(64)
    n = _C.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    if n < 0:  # buffer too small: -n is the size needed
        buf = ctypes.create_string_buffer(-n)
        n = _C.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    return buf.raw[:n]


def token_text(vocab, token: int) -> str:
    """The vocabulary's own text for a token (control tokens by name, "<|im_end|>")."""
    return _C.llama_vocab_get_text(vocab, token).decode("utf-8")


def is_eog(vocab, token: int) -> bool:
    return bool(_C.llama_vocab_is_eog(vocab, token))


# ---- a context: KV cache, decoding, state -------------------------------------------------------
class Context:
    """A llama_context on a Model: its KV cache (sequence 0), one decode batch and the last logits.
    It keeps no count of the tokens it holds: the caller does (one count, Backend's)."""

    def __init__(self, model: Model, *, n_ctx: int, n_batch: int, n_threads: int, type_k: str = "f16",
                 type_v: str = "f16", flash_attn: bool = False, swa_full: bool = False, op_offload: bool = True):
        n_ctx = n_ctx if n_ctx > 0 else model.n_ctx_train()
        self.n_batch = min(n_ctx, n_batch)  # llama.cpp decodes at most n_batch tokens per call
        p = _C.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch = n_ctx, self.n_batch, self.n_batch
        p.n_threads = p.n_threads_batch = n_threads
        p.type_k, p.type_v = _ggml_type(type_k), _ggml_type(type_v)
        p.flash_attn_type = _C.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else _C.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.swa_full, p.op_offload = swa_full, op_offload
        # What llama-cpp-python's Llama() set where llama.cpp's defaults differ, so a model computes
        # exactly what it did before this seam (YaRN: llama.cpp's -1 would read the GGUF's values).
        p.yarn_ext_factor, p.yarn_attn_factor, p.yarn_beta_fast, p.yarn_beta_slow = -1.0, 1.0, 32.0, 1.0
        p.no_perf = False
        self.ptr = _C.llama_init_from_model(model.ptr, p)
        if not self.ptr:
            raise LoadFailed("llama.cpp could not create a context")
        self.memory = _C.llama_get_memory(self.ptr)
        self._batch = _C.llama_batch_init(self.n_batch, 0, 1)
        # abort(): the CPU backend stops a decode at its next graph node (GPU backends ignore it)
        self._abort = AbortFlag()
        _C.llama_set_abort_callback(self.ptr, _C.ggml_abort_callback(self._abort.callback), self._abort.data)
        self._model = model
        model._contexts.append(self)  # freed before its model

    def n_ctx(self) -> int:
        return int(_C.llama_n_ctx(self.ptr))

    def decode(self, tokens: list[int], n_past: int, rows_from: int | None = None) -> None:
        """Evaluate `tokens` (at most n_batch) at positions n_past.., with logits for the last one
        only, or for every token from index `rows_from` on (a speculative draft's verification:
        `logits(i)` reads token i's).

        Raises:
            DecodeFailed: llama.cpp could not; the cache may hold part of them (remove_from fixes it).
        """
        batch, n = self._batch, len(tokens)
        if n == 0:
            return
        batch.n_tokens = n
        first = n - 1 if rows_from is None else max(0, min(rows_from, n - 1))
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i] = token, n_past + i
            batch.seq_id[i][0], batch.n_seq_id[i], batch.logits[i] = 0, 1, i >= first
        code = _C.llama_decode(self.ptr, batch)
        if code == 2 and self._abort.is_set():
            raise DecodeAborted("llama_decode was aborted")
        if code != 0:
            raise DecodeFailed(f"llama_decode returned {code}")

    def set_threads(self, n_threads: int, n_batch: int) -> None:
        """Threads for one-token decodes and for batches, from the next decode on."""
        _C.llama_set_n_threads(self.ptr, n_threads, n_batch)

    def abort(self) -> None:
        """Stop the running decode from any thread (CPU backend only); until `clear_abort()`."""
        self._abort.set()

    def clear_abort(self) -> None:
        self._abort.clear()

    def synchronize(self) -> None:
        """Wait for the queued work (on a GPU llama_decode only queues it)."""
        _C.llama_synchronize(self.ptr)

    def last_logits(self):
        """A ctypes float pointer to the last evaluated position's logits (n_vocab of them)."""
        return _C.llama_get_logits_ith(self.ptr, -1)

    def logits(self, row: int):
        """The logits of token `row` of the last decode (-1: its last), a ctypes float pointer."""
        return _C.llama_get_logits_ith(self.ptr, row)

    # sequence 0 of the KV cache
    def clear(self) -> None:
        _C.llama_memory_clear(self.memory, True)

    def remove(self, p0: int, p1: int = -1) -> bool:
        """Drop positions [p0, p1) (p1 -1: to the end); False where the cache cannot (partly SWA)."""
        return bool(_C.llama_memory_seq_rm(self.memory, 0, p0, p1))

    def pos_min(self) -> int:
        """The smallest position the cache still holds (sliding-window layers forget older ones)."""
        return int(_C.llama_memory_seq_pos_min(self.memory, 0))

    def pos_max(self) -> int:
        """The largest position the cache holds (-1: empty). Under M-RoPE an image's cells all
        hold its start, so this is not where the next id goes (engine/inference/positions.py)."""
        return int(_C.llama_memory_seq_pos_max(self.memory, 0))

    def can_shift(self) -> bool:
        return bool(_C.llama_memory_can_shift(self.memory))

    def shift(self, p0: int, p1: int, delta: int) -> None:
        """Add `delta` to the positions in [p0, p1) (p1 -1: to the end); RoPE is re-applied."""
        _C.llama_memory_seq_add(self.memory, 0, p0, p1, delta)

    def save_state(self) -> bytearray:
        """Sequence 0's state (the cache cells only, no logits), one copy into the returned buffer."""
        size = _C.llama_state_seq_get_size(self.ptr, 0)
        data = unfilled(size)  # not zeroed under the GIL: llama.cpp writes it, then the tail goes
        view = (ctypes.c_uint8 * size).from_buffer(data)
        n = _C.llama_state_seq_get_data(self.ptr, view, size, 0)
        del view  # release the export before resizing
        del data[n:]
        return data

    def load_state(self, data: bytes | bytearray) -> bool:
        """Put back what save_state took (a bytearray is read in place); False if llama.cpp refuses."""
        if isinstance(data, bytearray):
            buf = (ctypes.c_uint8 * len(data)).from_buffer(data)
        else:
            buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        ok = _C.llama_state_seq_set_data(self.ptr, buf, len(data), 0) == len(data)
        del buf
        return ok

    def close(self) -> None:
        if self.ptr:
            _C.llama_batch_free(self._batch)
            _C.llama_free(self.ptr)
        self.ptr = self.memory = None

    def __del__(self) -> None:
        if _C is not None and getattr(self, "ptr", None):
            self.close()


def _ggml_type(name: str) -> int:
    if name not in KV_CACHE_TYPES:
        raise ValueError(f"unsupported KV cache type '{name}' (use one of {', '.join(KV_CACHE_TYPES)})")
    return {"f16": _C.GGML_TYPE_F16, "q8_0": _C.GGML_TYPE_Q8_0, "q4_0": _C.GGML_TYPE_Q4_0}[name]


# ---- sampling: engine/inference/llama_sampling.py (the chain, grammars), through this seam's `_C`
from engine.inference.llama_sampling import Grammar, GrammarError, Sampler  # noqa: F401,I001 - re-exported here


# A JSON string's character, as llama.cpp's own converter writes it now.
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


def _converter():
    """The port's converter, writing repetition as engine/inference/gbnf.py does (it nested a group
    per item, and llama.cpp's parser recursed through them to the end of the stack)."""
    from llama_cpp import llama_grammar

    llama_grammar._build_repetition = gbnf.repetition  # the port calls it by its module's name
    return llama_grammar


def json_schema_grammar(schema: dict, own_rule) -> str:
    """GBNF for a JSON schema: llama-cpp-python's port of llama.cpp's converter, with `own_rule(schema)`
    giving the GBNF of the (sub)schemas it writes itself (None: the converter's)."""
    import json

    init()
    port = _converter()

    class Converter(port.SchemaConverter):
        def _add_primitive(self, name, rule):
            if name == "char":  # the port lets raw control characters into strings; JSON does not
                rule = port.BuiltinRule(JSON_CHAR, rule.deps)
            return super()._add_primitive(name, rule)

        def visit(self, schema, name):
            body = own_rule(schema) if isinstance(schema, dict) else None
            if body is None:
                return super().visit(schema, name)
            return self._add_rule(name + "-" if name in port.RESERVED_NAMES else name or "root", body)

    converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(json.loads(json.dumps(schema)), "request"), "")
    return converter.format_grammar()


def json_object_grammar() -> str:
    """GBNF for any JSON object (llama.cpp's json.gbnf)."""
    init()
    from llama_cpp.llama_grammar import JSON_GBNF

    return JSON_GBNF
