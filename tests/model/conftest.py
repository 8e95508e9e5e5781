import pytest

from engine.inference.backend import Backend, LoadParams
from engine.api import Assistant, EngineConfig
from engine.storage import Database
from engine.config.paths import db_path

from .helpers import THREADS


@pytest.fixture(params=["demo-small", "demo-int4"])
def model_id(request, model_paths):
    return request.param


@pytest.fixture
def assistant(model_id):
    a = Assistant(Database(db_path()), EngineConfig(model=model_id, load=LoadParams(n_ctx=2048, n_threads=THREADS)))
    yield a
    a.close()
    a.db.close()


def open_backend(path, n_ctx=2048) -> Backend:
    return Backend(path, LoadParams(n_ctx=n_ctx, n_threads=THREADS))


@pytest.fixture(scope="session")
def ready_embedder():
    """The bundled sentence embedder, loaded once for every test that needs it ready."""
    from engine.memory import Embedder

    emb = Embedder().start()
    assert emb.wait(300), emb.state
    return emb
