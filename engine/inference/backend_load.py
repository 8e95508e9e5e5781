"""Loading a Backend's model and context, and the watch that aborts a running prompt piece
(engine/inference/backend.py's helpers, apart so that the class reads as what it does)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, TYPE_CHECKING

from engine.inference import llama_seam as llama
from engine.inference.cpu_facts import cpu_facts
from engine.inference.errors import DeviceMemoryError, ModelLoadError
from engine.inference.load_log import device_out_of_memory

if TYPE_CHECKING:
    from engine.inference.backend import LoadParams


def load(path: Path, params: LoadParams, devices: list[int] | None, arch: str, debug: bool):
    """(model, context, llama.cpp's load log) for `params`; ModelLoadError, worded for the user."""
    n_threads = params.n_threads or cpu_facts().top  # Backend sets the calibrated counts after the load
    llama.init()  # here, not in the try below: a broken llama.cpp install says so, not "damaged file"
    llama.set_verbose(debug)
    with llama.LoadLog() as captured:
        try:
            # On the CPU llama.cpp repacks Q4_0/Q4_K/IQ4_NL weights into a layout of the CPU's own
            # (AVX2, AVX-512, NEON), in anonymous memory; from a mapped file the originals it read
            # stay resident beside the copy: 1.9 GB instead of 1.3 GB at 1.5B Q4_K_M (issue 25).
            # Read into memory instead, each tensor lands once. A GPU plan keeps the mapping: the
            # offloaded layers are copied to the device and need no copy in RAM.
            model = llama.Model(path, n_gpu_layers=params.n_gpu_layers, devices=devices,
                                mmap=params.n_gpu_layers > 0)
            try:
                ctx = llama.Context(
                    model, n_ctx=params.n_ctx, n_batch=params.n_batch, n_threads=n_threads,
                    type_k=params.type_k, type_v=params.type_v, flash_attn=params.flash_attn,
                    swa_full=params.swa_full,
                    # A CPU plan keeps work off any device: llama.cpp would otherwise copy weights to
                    # a GPU for each big batch (a 374-token prompt: 49 s on a software Vulkan device).
                    op_offload=params.n_gpu_layers > 0)
            except BaseException:
                model.close()
                raise
        except (ValueError, RuntimeError, OSError) as exc:
            text = captured.text()
            if params.n_gpu_layers > 0 and device_out_of_memory(text):
                raise DeviceMemoryError(
                    f"the GPU ({params.gpu_device or 'default device'}) could not hold {path.name} with "
                    f"{params.n_gpu_layers} layers and a {params.n_ctx}-token context: out of device memory"
                ) from exc
            where = f" on {params.gpu_device or 'the GPU'}" if params.n_gpu_layers > 0 else ""
            raise ModelLoadError(
                f"llama.cpp could not load {path.name} (architecture '{arch or 'unknown'}'){where}: the file "
                f"may be damaged or of an architecture this llama.cpp ({llama.version()}) does not support"
            ) from exc
    return model, ctx, captured.text()


ABORT_POLL_S = 0.02  # how often a running prompt piece asks its stop()
ABORT_WATCH_THREAD = "abort-watch"


class AbortWatch:
    """Asks `stop()` every ABORT_POLL_S while a prompt is evaluated, and aborts the context's
    running decode once it says so. A thread of its own: the model's thread is inside llama_decode."""

    def __init__(self, ctx: llama.Context, stop: Callable[[], bool]):
        self._ctx, self._stop = ctx, stop
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=ABORT_WATCH_THREAD, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(ABORT_POLL_S):
            if self._stop():
                self._ctx.abort()
                return

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        self._ctx.clear_abort()  # a flag raised after the last piece must not abort the next decode
