"""Which models are loaded: load on demand, keep several while the memory budget allows,
evict the least recently used idle one otherwise (closed before the next loads)."""

from __future__ import annotations

import logging
import threading

import psutil

from dataclasses import replace
from typing import Callable

from engine.inference.backend import Backend, LoadParams
from engine.inference.draft_model import DraftModel
from engine.inference.errors import DeviceMemoryError, ModelLoadError
from engine.models.catalog import Catalog, ModelNotFound, ResolvedModel, resolve_draft, resolve_model
from engine.models.draft_pair import vocab_mismatch
from engine.models.devices import DEFAULT_MARGIN_MB, MIB, DeviceSnapshot, GPUInfo, snapshot
from engine.models.gguf_info import GGUFError
from engine.models.planner import Plan, PlanError, plan, ram_bytes
from engine.inference.runtime import FOREGROUND, BackendFactory, Worker

log = logging.getLogger(__name__)
# Host memory a longer context may add to a load (runtime.n_ctx_max): 1 GiB, or a tenth of the
# budget if that is less. demo-small at 8192 tokens adds 90 MiB; a 7B Qwen2.5 at 16384 on the CPU ~0.7 GiB.
LONGER_CTX_BYTES = 1 << 30


def plan_error(p: Plan, report: dict) -> dict:
    """Relative error of the plan against what llama.cpp allocated (its logged buffer sizes)."""
    def rel(planned: int, actual: int) -> float | None:
        return round((planned - actual) / actual, 5) if actual else None

    # A mapped file holds every tensor, with CPU_REPACK copies of some beside it; a read one (the
    # CPU's load mode) holds each tensor once, repacked or not.
    mapped = any(buft.endswith("_Mapped") for buft in report.get("weights", {}))
    weights_actual = report.get("weights_bytes", 0) - (report.get("weights_repack_bytes", 0) if mapped else 0)
    error = {"kv": rel(p.kv_bytes_total, report.get("kv_bytes", 0)),
             "weights": rel(p.weights_bytes_total, weights_actual),
             "compute_estimate": rel(p.compute_buffer_bytes_estimate, report.get("compute_bytes", 0))}
    log.info("plan vs allocation for %s: %s", p.model, error)
    return error


def _label(gpu: GPUInfo) -> str:
    return f"{gpu.name} ({gpu.device})"


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
        gpu_device: which GPU ("auto", "none" or a ggml device name such as "Vulkan0").
        n_gpu_layers: the user's layer count for every local load (-1 = all), instead of the plan's.
        devices: reads the machine (tests: a scripted snapshot).

    A GPU load that fails falls back instead of failing the turn: out of device memory → half the
    layers, then the CPU; any other GPU failure → the CPU. Each fallback, a GPU that could not be
    used, and a load that got fewer layers than the last one (VRAM taken by another app) leave a
    note on the worker (`load_note`): done.fallback and the window's banner show it.
    """

    def __init__(self, budget_bytes: int | None = None, params: LoadParams = LoadParams(),
                 debug: bool = False, catalog: Catalog | None = None, vram_budget_mb: float | None = None,
                 backend_factory: BackendFactory | None = None, gpu_device: str = "auto",
                 n_gpu_layers: int | None = None, devices: Callable[[], DeviceSnapshot] = snapshot,
                 n_ctx_max: int | None = None):
        self.budget_bytes = budget_bytes if budget_bytes is not None else int(psutil.virtual_memory().available * 0.8)
        self.params = params
        self.vram_budget_mb = vram_budget_mb
        self.debug = debug
        self.catalog = catalog
        self.backend_factory = backend_factory
        self.gpu_device = gpu_device
        self.n_gpu_layers = n_gpu_layers
        self.devices = devices
        self.n_ctx_max = n_ctx_max  # a longer context the plan may take when it is cheap (_longer)
        self._last_layers: dict[str, int] = {}  # model path -> layers on the GPU at its last load
        self._workers: dict[str, tuple[Worker, int]] = {}  # resolved path -> (worker, bytes)
        self._lock = threading.RLock()  # held through a load (seconds): never take it from a GUI thread
        self.evictions = 0
        # The loaded workers, republished on every change: status readers take this, not the lock.
        self.published: tuple[Worker, ...] = ()

    def resolve(self, name_or_path: str | None) -> ResolvedModel:
        return resolve_model(name_or_path, self.catalog)

    def plan_for(self, model: ResolvedModel, gpu: bool) -> Plan:
        """How `model` would be loaded now (on the chosen GPU if `gpu`), without loading it."""
        return self._plan(model, gpu)[0]

    def _plan(self, model: ResolvedModel, gpu: bool) -> tuple[Plan, GPUInfo | None, str | None]:
        """The plan, the GPU it is for (None: CPU) and a note when the GPU could not be used as asked."""
        want_gpu = gpu or bool(self.n_gpu_layers)
        device, note, budget = None, None, 0.0
        if want_gpu:
            snap = self.devices()
            device = snap.gpu(self.gpu_device)
            if device is None:
                if self.gpu_device not in ("auto", "none"):
                    note = f"no GPU device {self.gpu_device!r}: running on the CPU" + (f" ({snap.note})" if snap.note else "")
                elif snap.skipped or any(not g.device for g in snap.gpus):
                    note = f"running on the CPU: {snap.note}"
            elif self.vram_budget_mb is not None:
                budget = min(self.vram_budget_mb, device.free_bytes / MIB)
            else:
                budget = max(0.0, device.free_bytes / MIB - DEFAULT_MARGIN_MB)
        layers = self.n_gpu_layers if device is not None else None
        draft, _ = self._draft_for(model)
        try:
            p = plan(model.path, budget, self.params.n_ctx, swa_full=self.params.swa_full,
                     catalog=self.catalog, n_gpu_layers=layers, draft=draft.path if draft else None)
        except (GGUFError, PlanError, ValueError) as exc:
            # ValueError too: a GGUF without its architecture's metadata (no block_count) fails in
            # kv_math; as a ModelLoadError the turn falls back to another tier instead of crashing.
            raise ModelLoadError(str(exc)) from exc
        if self.n_ctx_max and self.n_ctx_max > p.n_ctx:
            p = self._longer(model, p, budget, layers)
        if device is not None and p.n_gpu_layers == 0:
            device = None
        if device is not None and p.offload == "partial" and layers is None:
            note = (f"only {p.n_gpu_layers} of {p.n_layers + 1} layers fit on {_label(device)} "
                    f"({budget:.0f} MiB to use); the rest run on the CPU")
        return p, device, note

    def _draft_for(self, model: ResolvedModel) -> tuple[ResolvedModel | None, str]:
        """The draft model the catalog pairs with `model`, downloaded and of the same vocabulary
        (engine/models/draft_pair.py), or None and why not, in words for the user."""
        draft, why = resolve_draft(model, self.catalog)
        if draft is not None:
            try:
                why = vocab_mismatch(model.path, draft.path) or ""
            except GGUFError as exc:
                why = str(exc)
        if why:
            log.debug("no draft model for %s: %s", model.id, why)
            return None, why
        return draft, ""

    def _load_draft(self, worker: Worker, model: ResolvedModel, p: Plan) -> None:
        """Load the plan's draft model on the target's thread, beside it (a token source drives
        both on one thread: engine/inference/tokens.py); a draft that fails to load leaves plain
        and n-gram decoding, with the reason in the log."""
        draft, worker.draft_note = self._draft_for(model)
        if draft is None:
            return
        if p.draft is None:
            worker.draft_note = f"the plan for {model.id} placed no draft model"
            return
        params = replace(self.params, **{k: v for k, v in p.draft.load_kwargs().items() if k != "n_batch"})
        factory = self.backend_factory or Backend

        def load(w: Worker, job) -> None:
            w.draft = DraftModel(factory(draft.path, params, debug=self.debug), draft.id)

        try:
            for _ in worker.submit(load, FOREGROUND):
                pass
            log.info("loaded the draft model %s beside %s (%s)", draft.id, model.id, p.draft.placement)
        except Exception as exc:  # noqa: BLE001 - drafting is an optimisation; the model answers without it
            log.warning("could not load the draft model %s for %s: %s", draft.id, model.id, exc)
            worker.draft_note = f"the draft model {draft.id} could not be loaded: {exc}"

    def _longer(self, model: ResolvedModel, base: Plan, budget: float, layers: int | None) -> Plan:
        """The longest context up to n_ctx_max (halving down) that the model was trained for and
        that costs no GPU layers, no coarser KV type and at most LONGER_CTX_BYTES more host memory
        than `base`: a long paste is then answered without a reload. Else `base`."""
        extra = min(LONGER_CTX_BYTES, self.budget_bytes // 10)
        n_ctx = self.n_ctx_max
        while n_ctx > base.n_ctx:
            try:
                p = plan(model.path, budget, n_ctx, swa_full=self.params.swa_full, catalog=self.catalog,
                         n_gpu_layers=layers)
            except (GGUFError, PlanError, ValueError):
                return base
            # The planner keeps GPU memory within `budget`; what a longer context may not do is
            # push layers off the GPU, coarsen the KV cache or take much more host memory.
            if (p.n_ctx > base.n_ctx and p.n_gpu_layers >= base.n_gpu_layers and p.type_k == base.type_k
                    and ram_bytes(p) - ram_bytes(base) <= extra):
                return p
            n_ctx //= 2
        return base

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
            p, device, note = self._plan(model, gpu)
            need = ram_bytes(p)
            if need > self.budget_bytes:
                # Evicting every other model would not make room: refuse before evicting any, so the
                # models already loaded (the other tier) keep answering.
                raise ModelLoadError(
                    f"model {model.id} needs ~{need >> 20} MiB of memory ({p.offload} load, {p.n_ctx}-token "
                    f"context), more than the {self.budget_bytes >> 20} MiB budget; choose a smaller model "
                    "or context, or free some memory")
            self._make_room(need)
            last = self._last_layers.get(key)
            if device is not None and last is not None and p.n_gpu_layers < last:
                note = (f"less free memory on {_label(device)} than at the last load ({device.free_bytes // MIB} MiB "
                        f"free now): {p.n_gpu_layers} layers on the GPU instead of {last}")
            worker, p, fell_back = self._load_with_fallback(model, p, device)
            self._load_draft(worker, model, p)
            note = fell_back or note
            worker.plan = p
            worker.load_note = note
            worker.plan_error = plan_error(p, worker.backend.memory_report)
            self._last_layers[key] = p.n_gpu_layers
            self._workers[key] = (worker, ram_bytes(p))
            self._publish()
            log.info("loaded %s (%s, ~%d MiB host memory)%s; %d model(s) resident", model.id, p.offload,
                     ram_bytes(p) >> 20, f" [{note}]" if note else "", len(self._workers))
            return worker

    def _load_with_fallback(self, model: ResolvedModel, p: Plan, device: GPUInfo | None) -> tuple[Worker, Plan, str | None]:
        """Load as planned; on a GPU failure retry with half the layers (out of memory) or on the CPU."""
        note = None
        while True:
            params = replace(self.params, **{k: v for k, v in p.load_kwargs().items() if k != "n_batch"},
                             gpu_device=device.device if device is not None and p.n_gpu_layers > 0 else None)
            try:
                return Worker.load(model, params, self.debug, self.backend_factory), p, note
            except ModelLoadError as exc:
                if p.n_gpu_layers == 0:
                    raise
                fewer = p.n_gpu_layers // 2 if isinstance(exc, DeviceMemoryError) else 0
                log.warning("GPU load of %s failed (%s); retrying with %d layers", model.id, exc, fewer)
                note = f"{exc}; loaded with {fewer} layers on the GPU" if fewer else f"{exc}; running on the CPU"
                p = plan(model.path, p.budget_bytes / MIB, self.params.n_ctx, swa_full=self.params.swa_full,
                         catalog=self.catalog, n_gpu_layers=fewer, layers_reason="after the GPU load failed")

    def _make_room(self, need: int) -> None:
        used = sum(b for _, b in self._workers.values())
        idle = sorted((w.last_used, key) for key, (w, _) in self._workers.items() if not w.serving)
        while used + need > self.budget_bytes and idle:
            _, key = idle.pop(0)
            worker, size = self._workers.pop(key)
            self._publish()
            worker.close()  # close before loading the next: never both in memory
            used -= size
            self.evictions += 1
            log.info("evicted %s to make room (budget %d MB)", worker.model.id, self.budget_bytes >> 20)
        if used + need > self.budget_bytes:
            log.warning("model needs ~%d MB, %d MB of %d MB budget in use by models answering now; loading anyway",
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
