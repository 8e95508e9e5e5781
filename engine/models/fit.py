"""How a model would run on this machine, in one word: the catalog listing (`assistant models`),
hub search results (`assistant models search`) and the model manager's badges all say it the same way.

Words: "gpu" (all on the GPU), "partial" (some layers on it), "cpu", "too_big" (more than the free
RAM), "unknown" (it cannot be planned or sized). A catalog model is planned (engine/models/planner.py);
a hub file not downloaded yet has no known shape, so its need is its size plus an allowance for the
KV cache and buffers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engine.models.catalog import ModelEntry
from engine.models.kv_math import MIB
from engine.models.planner import Plan, plan, ram_bytes

log = logging.getLogger(__name__)

FIT_CTX = 4096  # the context fits are judged for (settings' runtime.n_ctx default)
# A file's size → the memory a load of it needs, when its shape is unknown: the KV cache and
# compute buffers of a 4096-token context are a few hundred MiB for a laptop-sized model.
UNPLANNED_FRACTION, UNPLANNED_BYTES = 0.15, 300 * MIB


@dataclass(frozen=True)
class Fit:
    word: str  # gpu | partial | cpu | too_big | unknown
    plan: Plan | None = None  # the plan behind it (catalog models that could be planned)
    why: str = ""  # "unknown": why it could not be planned


def unplanned_need(size_bytes: int) -> float:
    """Memory a model file of `size_bytes` needs when its shape is unknown."""
    return size_bytes * (1 + UNPLANNED_FRACTION) + UNPLANNED_BYTES


def plan_fit(entry: ModelEntry, vram_budget_mb: float | None, ram_available: int) -> Fit:
    """The fit of a catalog model: L2 models planned into the VRAM budget (None: free VRAM minus a
    margin), L1 models on the CPU; never raises, a listing lists every model."""
    try:
        p = plan(entry, vram_budget_mb if entry.tier == "L2" else 0, FIT_CTX)
    except Exception as exc:  # noqa: BLE001 - any planning failure is "unknown", with its words
        log.info("cannot plan %s: %s", entry.id, exc)
        return Fit("unknown", None, str(exc))
    if ram_bytes(p) > ram_available:
        return Fit("too_big", p)
    return Fit({"full": "gpu", "partial": "partial"}.get(p.offload, "cpu"), p)


def size_fit(size_bytes: int, vram_bytes: float, ram_available: int) -> str:
    """The fit of a file not downloaded yet, from its size: all on the GPU, else the CPU, else split
    between them; "unknown" when the hub gave no size."""
    if size_bytes <= 0:
        return "unknown"
    need = unplanned_need(size_bytes)
    if need <= vram_bytes:
        return "gpu"
    if need <= ram_available:
        return "cpu"
    if vram_bytes and need <= vram_bytes + ram_available:
        return "partial"
    return "too_big"
