"""Background threads yield the CPU to the window: on a laptop's two or four cores, a thread that
computes (a model, the embedder, an indexer) otherwise takes a whole time slice from the GUI thread
now and then. Idle cores make this cost nothing."""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

BACKGROUND_NICE = 5  # how much lower than the app's other threads a computing thread runs (Linux)


def yield_cpu_to_the_ui() -> None:
    """Lower the calling thread's scheduling priority a little (Linux: per-thread nice, inherited by
    the threads it starts after this: ggml's and ONNX Runtime's compute threads)."""
    if not hasattr(os, "setpriority") or not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE))
    except OSError as exc:
        log.debug("thread keeps its priority: %s", exc)
