"""Which models are loaded: load on demand, keep several while the memory budget allows,
evict the least recently used idle one otherwise (closed before the next loads)."""

from __future__ import annotations

import logging
import threading

import psutil

from engine.backend import LoadParams, ModelLoadError
from engine.catalog import Catalog, ResolvedModel, resolve_model
from engine.gguf_info import GGUFError, read_gguf
from engine.runtime import Worker

log = logging.getLogger(__name__)


def estimate_bytes(model: ResolvedModel, params: LoadParams) -> int:
    """Memory a loaded model needs: weights (file size) + f16 KV for n_ctx + ~10 % compute buffers."""
    info = read_gguf(model.path)
    n_layers = int(info.arch_value("block_count", 0) or 0)
    n_kv = info.arch_value("attention.head_count_kv", 0) or 0
    n_kv = max(n_kv) if isinstance(n_kv, list) else int(n_kv)
    n_embd = int(info.arch_value("embedding_length", 0) or 0)
    n_head = info.arch_value("attention.head_count", 1) or 1
    n_head = max(n_head) if isinstance(n_head, list) else int(n_head)
    k_len = int(info.arch_value("attention.key_length", n_embd // max(n_head, 1)) or 0)
    v_len = int(info.arch_value("attention.value_length", k_len) or 0)
    kv = n_layers * n_kv * (k_len + v_len) * 2 * params.n_ctx
    return int(model.path.stat().st_size * 1.1) + kv


class ModelManager:
    """Owns every loaded `Worker`; one per model file, never two copies.

    Args:
        budget_bytes: memory the loaded models may use together (default: 80 % of available RAM).
        params: load parameters for every model.
    """

    def __init__(self, budget_bytes: int | None = None, params: LoadParams = LoadParams(),
                 debug: bool = False, catalog: Catalog | None = None):
        self.budget_bytes = budget_bytes if budget_bytes is not None else int(psutil.virtual_memory().available * 0.8)
        self.params = params
        self.debug = debug
        self.catalog = catalog
        self._workers: dict[str, tuple[Worker, int]] = {}  # resolved path -> (worker, bytes)
        self._lock = threading.RLock()
        self.evictions = 0

    def resolve(self, name_or_path: str | None) -> ResolvedModel:
        return resolve_model(name_or_path, self.catalog)

    def get(self, name_or_path: str | None) -> Worker:
        """The loaded worker for a model, loading it (and evicting LRU idle ones) if needed.

        Raises:
            ModelNotFound, ModelLoadError: the model cannot be loaded.
        """
        model = self.resolve(name_or_path)
        key = str(model.path)
        with self._lock:
            if key in self._workers:
                return self._workers[key][0]
            try:
                need = estimate_bytes(model, self.params)
            except GGUFError as exc:
                raise ModelLoadError(str(exc)) from exc
            self._make_room(need)
            worker = Worker.load(model, self.params, self.debug)
            self._workers[key] = (worker, need)
            log.info("loaded %s (~%d MB); %d model(s) resident", model.id, need >> 20, len(self._workers))
            return worker

    def _make_room(self, need: int) -> None:
        used = sum(b for _, b in self._workers.values())
        idle = sorted((w.last_used, key) for key, (w, _) in self._workers.items() if not w.busy)
        while used + need > self.budget_bytes and idle:
            _, key = idle.pop(0)
            worker, size = self._workers.pop(key)
            worker.close()  # close before loading the next: never both in memory
            used -= size
            self.evictions += 1
            log.info("evicted %s to make room (budget %d MB)", worker.model.id, self.budget_bytes >> 20)
        if used + need > self.budget_bytes:
            log.warning("model needs ~%d MB, %d MB of %d MB budget in use by busy models; loading anyway",
                        need >> 20, used >> 20, self.budget_bytes >> 20)

    def loaded(self) -> list[Worker]:
        with self._lock:
            return [w for w, _ in self._workers.values()]

    def find_loaded(self, name_or_path: str) -> Worker | None:
        with self._lock:
            for worker, _ in self._workers.values():
                if worker.model.id == name_or_path or str(worker.model.path) == name_or_path:
                    return worker
        return None

    def close(self) -> None:
        with self._lock:
            for worker, _ in self._workers.values():
                worker.close()
            self._workers.clear()
