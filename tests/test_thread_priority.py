"""Threads that compute in the background run a little behind the window (Linux: per-thread nice):
a model's thread, the memory embedder's and the indexers'. On two cores an indexer or the embedder
at the window's priority took whole time slices from the GUI thread just after an answer
(bench/gui_latency.py)."""

import os
import sys
import threading

import pytest

from engine.config.priority import BACKGROUND_NICE, yield_cpu_to_the_ui
from engine.retrieval.worker import IndexWorker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_a_yielding_thread_and_the_threads_it_starts_run_behind_the_app():
    app = nice_of(threading.get_native_id())
    seen = {}

    def child():
        seen["child"] = nice_of(threading.get_native_id())

    def background():
        yield_cpu_to_the_ui()
        seen["own"] = nice_of(threading.get_native_id())
        t = threading.Thread(target=child)  # as ggml's and ONNX Runtime's compute threads are
        t.start()
        t.join()

    t = threading.Thread(target=background)
    t.start()
    t.join()
    expected = min(19, app + BACKGROUND_NICE)
    assert seen == {"own": expected, "child": expected}
    assert nice_of(threading.get_native_id()) == app  # the caller's own thread is untouched


def test_an_indexing_thread_runs_behind_the_app():
    seen = []
    worker = IndexWorker("test-indexer", lambda job: seen.append(nice_of(threading.get_native_id())),
                         lambda: True, idle_s=0.05)
    worker.start()
    worker.put("job")
    assert worker.wait_for(lambda: worker.outstanding == 0, 10)
    worker.stop(10)
    assert seen == [min(19, nice_of(threading.get_native_id()) + BACKGROUND_NICE)]
