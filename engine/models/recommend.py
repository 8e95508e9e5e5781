"""A first L1/L2 pair for this machine, from the catalog, the planner and a device snapshot.

Only instruction-tuned, non-demo catalog entries are candidates. Memory needs come from the planner
(`plan` + `ram_bytes`, catalog facts when the file is not downloaded; a model's draft, which is
downloaded with it, counted beside it); a model without the facts to plan is costed by
`fit.unplanned_need` (its file size plus 15 % and 300 MiB).

Speed class (a rule of thumb, shown to the user as "fast" / "usable" / "slow"): decoding one token
reads every weight once, so tokens/s ≈ memory bandwidth ÷ bytes of weights. Bandwidth is taken as
20 GB/s on the CPU (dual-channel laptop DDR4/DDR5 as measured, not as advertised), 250 GB/s on a
discrete GPU (a 6–8 GB card: RTX 3060 ~360, RTX 4060 ~270), 100 GB/s on Apple's unified memory
and 40 GB/s on another integrated GPU. At or above 15 tok/s is "fast" (faster than reading),
5–15 "usable", below 5 "slow"; a model below 4 tok/s is never recommended.

L1 is the largest candidate that runs "fast" on the CPU (else the largest "usable" one) and needs
at most half the available RAM (the other half: L2's CPU side, the OS, the app). L2 is the largest
candidate larger than L1 that fits the chosen GPU's free memory (minus the planner's margin) whole;
with no such GPU, a larger CPU model than L1 if the RAM left beside L1 allows it and it reaches 4 tok/s; else
None (the app then gives L2 the L1 model). Each role looks first at the catalog rows meant for it
(`tier`: "L1" = the CPU pick of its size class, "L2" = the 6 GB-GPU pick; a CPU-only L2 takes the CPU
picks), then at the rest, so a reasoning model tuned for the GPU is not the quick CPU answerer.
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass
from pathlib import Path

from engine.models.catalog import Catalog, ModelEntry, load_catalog
from engine.models.devices import DeviceSnapshot, GPUInfo, default_vram_budget_mb, snapshot
from engine.models.fit import unplanned_need
from engine.models.planner import PlanError, plan, ram_bytes

log = logging.getLogger(__name__)

GB = 10**9
N_CTX = 4096  # the context the needs are planned for (settings' runtime.n_ctx default)
CPU_BANDWIDTH = 20 * GB  # bytes/s
GPU_BANDWIDTH = {"gpu": 250 * GB, "igpu": 40 * GB, "apple": 100 * GB}
FAST_TOKS, USABLE_TOKS, MIN_TOKS = 15.0, 5.0, 4.0
L1_RAM_SHARE = 0.5  # of available RAM


@dataclass(frozen=True)
class Pick:
    """One recommended model and what it takes here."""

    entry: ModelEntry
    ram_bytes: int   # host memory of the planned load
    vram_bytes: int  # GPU memory of the planned load (0 on the CPU)
    tok_s: float     # expected decode speed, from the bandwidth rule above
    speed: str       # "fast" | "usable" | "slow"
    why: str         # one sentence for the user

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def needs(self) -> dict[str, int]:
        return {"ram_bytes": self.ram_bytes, "vram_bytes": self.vram_bytes}


@dataclass(frozen=True)
class Recommendation:
    l1: Pick | None
    l2: Pick | None
    snapshot: DeviceSnapshot
    cpu_name: str
    gpu: GPUInfo | None  # the GPU the L2 pick was planned for
    ram_available: int   # bytes the picks were sized against
    # A model that reads images and fits beside L1 (issue 41): L1's or L2's own when it does, else
    # the largest vision model (tier "") that runs fast (else usable) on the CPU in the RAM left.
    vision: Pick | None = None


def speed_class(tok_s: float) -> str:
    return "fast" if tok_s >= FAST_TOKS else "usable" if tok_s >= USABLE_TOKS else "slow"


def bandwidth(gpu: GPUInfo | None) -> int:
    """Memory bandwidth (bytes/s) a model decodes at: the CPU's, or the GPU's by its kind."""
    if gpu is None:
        return CPU_BANDWIDTH
    if gpu.vendor == "apple":
        return GPU_BANDWIDTH["apple"]
    return GPU_BANDWIDTH.get(gpu.kind, GPU_BANDWIDTH["igpu"])


def cpu_name() -> str:
    """The CPU's marketing name ("AMD Ryzen 7 7840U …"), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def candidates(catalog: Catalog) -> list[ModelEntry]:
    """Instruct, non-demo entries, largest first (parameters, then file size); a draft model
    without a tier comes with its target, never as a pick of its own."""
    usable = [e for e in catalog.entries if not e.demo and getattr(e, "instruct", True) and e.size_bytes > 0
              and not catalog.draft_only(e) and not catalog.vision_only(e)]
    return sorted(usable, key=lambda e: (getattr(e, "params_b", 0.0) or 0.0, e.size_bytes), reverse=True)


def vision_pick(catalog: Catalog, l1: Pick | None, l2: Pick | None, ram_left: int) -> Pick | None:
    """What reads images on this machine (Recommendation.vision)."""
    for p in (l2, l1):
        if p is not None and getattr(p.entry, "projector", ""):
            return p
    pool = sorted((e for e in catalog.entries if catalog.vision_only(e) and getattr(e, "instruct", True)),
                  key=lambda e: (e.params_b, e.size_bytes), reverse=True)
    for floor in (FAST_TOKS, USABLE_TOKS):  # fast first: an image is hundreds of tokens to read
        for e in pool:
            need, _, _ = _needs(e, 0)
            pick = _pick(e, need, 0, None, "")
            if need <= ram_left and pick.tok_s >= floor:
                return _pick(e, need, 0, None, f"the largest model that reads images at a {pick.speed} speed on "
                                               "this CPU in the RAM left beside L1")
    return None


def _for(pool: list[ModelEntry], tier: str) -> list[ModelEntry]:
    """The catalog's picks for `tier` first, then the rest; each part largest first."""
    return [e for e in pool if e.tier == tier] + [e for e in pool if e.tier != tier]


def _needs(entry: ModelEntry, vram_budget_mb: float, draft: ModelEntry | None = None) -> tuple[int, int, str]:
    """(RAM, VRAM, offload) of a load with this budget (0 = CPU only), with the draft model the
    catalog pairs with it (it is downloaded with it); offload is the target's."""
    try:
        p = plan(entry, vram_budget_mb, N_CTX, draft=draft)
    except (PlanError, ValueError, OSError) as exc:  # a catalog row without the facts (a PlanError now)
        log.debug("no plan for %s (%s): sized from its file", entry.id, exc)
        need = int(unplanned_need(entry.size_bytes))
        return (need, 0, "cpu") if vram_budget_mb <= 0 else (0, need, "full" if need <= vram_budget_mb * 2**20
                                                            else "partial")
    return ram_bytes(p), p.gpu_bytes_total + (p.draft.gpu_bytes if p.draft else 0), p.offload


def _pick(entry: ModelEntry, ram: int, vram: int, gpu: GPUInfo | None, why: str) -> Pick:
    tok_s = bandwidth(gpu) / max(entry.size_bytes, 1)
    return Pick(entry, ram, vram, round(tok_s, 1), speed_class(tok_s), why)


def recommend_models(snapshot_: DeviceSnapshot | None = None, catalog: Catalog | None = None,
                     ram_available: int | None = None, gpu_device: str = "auto") -> Recommendation:
    """The L1/L2 pair for this machine (module docstring: the rules).

    Args:
        snapshot_: the machine (default: `devices.snapshot()` now; it can take a second).
        catalog: the models to choose from (default: the catalog file).
        ram_available: bytes of RAM to size against (default: the snapshot's available RAM).
        gpu_device: which GPU L2 is planned for ("auto", "none" or a ggml device name).
    """
    snap = snapshot_ if snapshot_ is not None else snapshot()
    catalog = catalog or load_catalog()
    ram = ram_available if ram_available is not None else snap.ram_available_bytes
    pool = candidates(catalog)

    l1 = None
    for floor in (FAST_TOKS, USABLE_TOKS):  # a fast model if one fits, else the largest usable one
        for e in _for(pool, "L1"):
            need, _, _ = _needs(e, 0, catalog.draft_of(e))
            pick = _pick(e, need, 0, None, "")
            if need <= ram * L1_RAM_SHARE and pick.tok_s >= floor:
                l1 = _pick(e, need, 0, None, f"the largest model that answers at a {pick.speed} speed on this "
                                             f"CPU and takes at most half the free RAM ({ram / GB:.1f} GB)")
                break
        if l1 is not None:
            break
    ram_left = ram - (l1.ram_bytes if l1 else 0)

    gpu = snap.gpu(gpu_device)
    if gpu is not None and gpu.software:
        gpu = None
    l2 = None
    if gpu is not None:
        budget = default_vram_budget_mb(snap, want=gpu.device or gpu_device)
        for e in _for(pool, "L2"):
            if l1 is not None and e.size_bytes <= l1.entry.size_bytes:
                continue  # no upgrade on L1
            need, vram, offload = _needs(e, budget, catalog.draft_of(e))
            if offload == "full" and need <= ram_left:
                l2 = _pick(e, need, vram, gpu, f"the largest model that fits whole in the free memory of "
                                               f"{gpu.name} ({gpu.free_bytes / GB:.1f} GB)")
                break
    if l2 is None:
        gpu = None  # L2 is not planned for the GPU
    if l2 is None and l1 is not None:
        floor = getattr(l1.entry, "params_b", 0.0) or 0.0
        for e in _for(pool, "L1"):
            if e.id == l1.id or e.size_bytes <= l1.entry.size_bytes or (getattr(e, "params_b", 0.0) or 0.0) < floor:
                continue
            need, _, _ = _needs(e, 0, catalog.draft_of(e))
            pick = _pick(e, need, 0, None, "")
            if need <= ram_left and pick.tok_s >= MIN_TOKS:
                l2 = _pick(e, need, 0, None, "no usable GPU: a larger model on the CPU, slower but better "
                                             "at harder questions, that fits the RAM left beside L1")
                break
    vision = vision_pick(catalog, l1, l2, ram - (l1.ram_bytes if l1 else 0) - (l2.ram_bytes if l2 else 0))
    return Recommendation(l1, l2, snap, cpu_name(), gpu, ram, vision)
