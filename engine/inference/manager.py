"""Which models are loaded: load on demand, keep several while the memory budget allows,
evict the least recently used idle one otherwise (closed before the next loads)."""

from __future__ import annotations

import logging
import threading

import psutil

from dataclasses import replace

from engine.inference.backend import LoadParams, ModelLoadError
from engine.models.catalog import Catalog, ModelNotFound, ResolvedModel, resolve_model
from engine.models.gguf_info import GGUFError
from engine.models.planner import Plan, PlanError, plan, ram_bytes
from engine.inference.runtime import BackendFactory, Worker

log = logging.getLogger(__name__)


def plan_error(p: Plan, report: dict) -> dict:
    """Relative error of the plan against what llama.cpp allocated (its logged buffer sizes)."""
    def rel(planned: int, actual: int) -> float | None:
        return round((planned - actual) / actual, 5) if actual else None

    weights_actual = report.get("weights_bytes", 0) - report.get("weights_repack_bytes", 0)
    error = {"kv": rel(p.kv_bytes_total, report.get("kv_bytes", 0)),
             "weights": rel(p.weights_bytes_total, weights_actual),
             "compute_estimate": rel(p.compute_buffer_bytes_estimate, report.get("compute_bytes", 0))}
    log.info("plan vs allocation for %s: %s", p.model, error)
    return error


class ModelManager:
    """Owns every loaded `Worker`; one per model file, never two copies.

    Each load is planned (engine.models.planner): a GPU model gets the VRAM budget and the planner's
    layers / context / KV type; a CPU model gets budget 0. The RAM the plans leave on the host
    is what the budget limits; a model that alone needs more than the budget is refused before
    anything is evicted.

    Args:
        budget_bytes: host memory the loaded models may use together (default: 80 % of available RAM).
        params: base load parameters (n_ctx wanted, threads); the plan fills in the rest.
        vram_budget_mb: VRAM for GPU models (None: free VRAM of the best GPU minus a margin).
        backend_factory: builds each model's backend instead of `Backend` (tests: a scripted fake);
            loads are still planned from the model file's GGUF metadata.
    """

    def __init__(self, budget_bytes: int | None = None, params: LoadParams = LoadParams(),
                 debug: bool = False, catalog: Catalog | None = None, vram_budget_mb: float | None = None,
                 backend_factory: BackendFactory | None = None):
        self.budget_bytes = budget_bytes if budget_bytes is not None else int(psutil.virtual_memory().available * 0.8)
        self.params = params
        self.vram_budget_mb = vram_budget_mb
        self.debug = debug
        self.catalog = catalog
        self.backend_factory = backend_factory
        self._workers: dict[str, tuple[Worker, int]] = {}  # resolved path -> (worker, bytes)
        self._lock = threading.RLock()  # held through a load (seconds): never take it from a GUI thread
        self.evictions = 0
        # The loaded workers, republished on every change: status readers take this, not the lock.
        self.published: tuple[Worker, ...] = ()

    def resolve(self, name_or_path: str | None) -> ResolvedModel:
        return resolve_model(name_or_path, self.catalog)

    def plan_for(self, model: ResolvedModel, gpu: bool) -> Plan:
        try:
            return plan(model.path, self.vram_budget_mb if gpu else 0, self.params.n_ctx,
                        swa_full=self.params.swa_full, catalog=self.catalog)
        except (GGUFError, PlanError, ValueError) as exc:
            # ValueError too: a GGUF without its architecture's metadata (no block_count) fails in
            # kv_math; as a ModelLoadError the facade falls back to another tier instead of crashing.
            raise ModelLoadError(str(exc)) from exc

    def get(self, name_or_path: str | None, gpu: bool = True) -> Worker:
        """The loaded worker for a model, loading it (and evicting LRU idle ones) if needed.

        Args:
            gpu: plan the load into the VRAM budget (the L2 tier); False keeps it on the CPU (L1).

        Raises:
            ModelNotFound, ModelLoadError: the model cannot be loaded.
        """
        model = self.resolve(name_or_path)
        key = str(model.path)
        with self._lock:
            if key in self._workers:
                return self._workers[key][0]
            p = self.plan_for(model, gpu)
            need = ram_bytes(p)
            if need > self.budget_bytes:
                # Evicting every other model would not make room: refuse before evicting any, so the
                # models already loaded (the other tier) keep answering.
                raise ModelLoadError(
                    f"model {model.id} needs ~{need >> 20} MiB of memory ({p.offload} load, {p.n_ctx}-token "
                    f"context), more than the {self.budget_bytes >> 20} MiB budget; choose a smaller model "
                    "or context, or free some memory")
            self._make_room(need)
            params = replace(self.params, **{k: v for k, v in p.load_kwargs().items() if k != "n_batch"})
            worker = Worker.load(model, params, self.debug, self.backend_factory)
            worker.plan = p
            worker.plan_error = plan_error(p, worker.backend.memory_report)
            self._workers[key] = (worker, need)
            self._publish()
            log.info("loaded %s (%s, ~%d MiB host memory); %d model(s) resident", model.id, p.offload,
                     need >> 20, len(self._workers))
            return worker

    def _make_room(self, need: int) -> None:
        used = sum(b for _, b in self._workers.values())
        idle = sorted((w.last_used, key) for key, (w, _) in self._workers.items() if not w.busy)
        while used + need > self.budget_bytes and idle:
            _, key = idle.pop(0)
            worker, size = self._workers.pop(key)
            self._publish()
            worker.close()  # close before loading the next: never both in memory
            used -= size
            self.evictions += 1
            log.info("evicted %s to make room (budget %d MB)", worker.model.id, self.budget_bytes >> 20)
        if used + need > self.budget_bytes:
            log.warning("model needs ~%d MB, %d MB of %d MB budget in use by busy models; loading anyway",
                        need >> 20, used >> 20, self.budget_bytes >> 20)

    def _publish(self) -> None:
        self.published = tuple(w for w, _ in self._workers.values())

    def loaded(self) -> list[Worker]:
        with self._lock:
            return [w for w, _ in self._workers.values()]

    def find_loaded(self, name_or_path: str) -> Worker | None:
        """The worker if that model is loaded now; never loads anything."""
        if not name_or_path:
            return None
        try:
            key = str(self.resolve(name_or_path).path)
        except ModelNotFound:
            return None
        with self._lock:
            entry = self._workers.get(key)
        return entry[0] if entry else None

    def close(self) -> None:
        with self._lock:
            workers = [w for w, _ in self._workers.values()]
            self._workers.clear()
            self._publish()
            for worker in workers:
                worker.close()
