"""A model that is only doing background work (a KV checkpoint, a summary) gives its memory to the
model a chat needs; one answering a chat keeps it (fake backends, real manager and workers)."""

import threading

from engine.inference.backend import LoadParams
from engine.inference.manager import ModelManager, ram_bytes
from engine.inference.runtime import BACKGROUND, FOREGROUND, ModelUnloaded
from tests.fake_backend import FakeModels


def one_model_at_a_time(tmp_path):
    fakes = FakeModels(tmp_path)
    for stem in ("l1", "l2"):
        fakes.model_file(stem)
    params = LoadParams(n_ctx=512, n_batch=32, n_threads=1)
    probe = ModelManager(params=params, backend_factory=fakes)
    sizes = [ram_bytes(probe.plan_for(probe.resolve(str(fakes.folder / f"{s}.gguf")), gpu=False)) for s in ("l1", "l2")]
    return fakes, ModelManager(budget_bytes=max(sizes) + 1, params=params, backend_factory=fakes)


def blocking_job():
    started, release = threading.Event(), threading.Event()

    def run(worker, job):
        started.set()
        while not (release.is_set() or job.cancel.is_set()):
            release.wait(0.01)

    return run, started, release


def test_background_work_does_not_keep_a_model_loaded(tmp_path):
    fakes, manager = one_model_at_a_time(tmp_path)
    try:
        l1 = manager.get(str(fakes.folder / "l1.gguf"), gpu=False)
        run, started, _ = blocking_job()
        running = l1.submit(run, BACKGROUND)
        queued = l1.submit(lambda w, job: None, BACKGROUND)
        assert started.wait(10) and not l1.serving
        manager.get(str(fakes.folder / "l2.gguf"), gpu=False)
        assert manager.evictions == 1 and [w.model.id for w in manager.loaded()] == ["l2"]
        assert running.done.is_set() and running.error is None  # asked to stop, and it did
        assert isinstance(queued.error, ModelUnloaded)
    finally:
        manager.close()


def test_a_model_answering_a_chat_stays_loaded(tmp_path):
    fakes, manager = one_model_at_a_time(tmp_path)
    try:
        l1 = manager.get(str(fakes.folder / "l1.gguf"), gpu=False)
        run, started, release = blocking_job()
        job = l1.submit(run, FOREGROUND)
        assert started.wait(10) and l1.serving
        manager.get(str(fakes.folder / "l2.gguf"), gpu=False)  # over budget, said in the log
        assert manager.evictions == 0 and len(manager.loaded()) == 2
        release.set()
        assert job.done.wait(10) and job.error is None
    finally:
        manager.close()


def test_a_queued_chat_job_keeps_it_too(tmp_path):
    fakes, manager = one_model_at_a_time(tmp_path)
    try:
        l1 = manager.get(str(fakes.folder / "l1.gguf"), gpu=False)
        run, started, release = blocking_job()
        l1.submit(run, BACKGROUND)
        assert started.wait(10)
        chat = l1.submit(lambda w, job: None, FOREGROUND)  # waits behind the background job
        assert l1.serving
        manager.get(str(fakes.folder / "l2.gguf"), gpu=False)
        assert manager.evictions == 0
        release.set()
        assert chat.done.wait(10) and chat.error is None and not l1.serving
    finally:
        manager.close()
