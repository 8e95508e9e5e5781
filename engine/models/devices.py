"""Device detection: the GPUs llama.cpp can use (ggml's device registry), with NVML and Apple
readings where they exist, and CPU and RAM.

A GPU is listed from ggml's registry (engine/models/ggml_registry.py): what the shipped backends
(Vulkan, CUDA, Metal) found. NVML, where it answers, gives an NVIDIA card's memory more exactly
(and without a CUDA context); an NVIDIA card that NVML sees but no backend can use is still listed,
with `device` empty and a note saying why (no Vulkan loader, no driver).

`snapshot()` is cheap enough for a live gauge (a few NVML, ggml and /proc reads, no process
spawn): NVML and the registry are initialised once per process. A machine without a GPU gets a
clean CPU-only report.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass, replace

import psutil

from engine.models.ggml_registry import GgmlDevice, Registry, choose_gpu, registry as ggml_registry

try:  # nvidia-ml-py is a dependency, but a broken install must not stop CPU-only use
    import pynvml
except ImportError:  # pragma: no cover - depends on the environment
    pynvml = None

log = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_MARGIN_MB = 512  # MiB kept free: CUDA context growth, cuBLAS workspace, fragmentation, the desktop
# Metal lets one process wire about 2/3 (small Macs) to 3/4 of RAM (recommendedMaxWorkingSetSize);
# the lower figure keeps the plan on the safe side.
APPLE_GPU_SHARE = 2 / 3


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    vendor: str  # "nvidia" | "amd" | "intel" | "apple" | "" (unknown)
    total_bytes: int
    free_bytes: int
    used_bytes: int
    unified: bool = False  # memory shared with the CPU (Apple Silicon, integrated GPUs)
    backend: str = ""      # the ggml backend that drives it ("vulkan", "cuda", "metal"); "" = none can
    device: str = ""       # ggml's device name ("Vulkan0"): what a load is given
    kind: str = "gpu"      # "gpu" (discrete) | "igpu" (integrated)
    software: bool = False  # a CPU rasteriser posing as a GPU (lavapipe): never chosen by "auto"
    memory_from: str = ""  # "nvml" | "ggml" | "apple": who reported the numbers


@dataclass(frozen=True)
class DeviceSnapshot:
    timestamp: float  # time.time()
    cpu_logical: int
    cpu_physical: int | None
    ram_total_bytes: int
    ram_available_bytes: int
    process_rss_bytes: int
    gpus: tuple[GPUInfo, ...] = ()
    gpu_backend: str = "none"  # the chosen GPU's backend ("vulkan", "cuda", "metal") or "none"
    driver_version: str | None = None
    note: str = ""  # why there is no GPU, or what went wrong reading it
    platform: str = ""  # "Linux x86_64", "Darwin arm64"
    backends: tuple[str, ...] = ()  # ggml backends compiled in and loaded: ("cpu", "vulkan")
    skipped: tuple[tuple[str, str], ...] = ()  # (backend, why it did not load)
    cpu_variant: str | None = None  # the CPU module ggml runs: "zen4", "haswell", ... (None: no variants)
    ggml_devices: tuple[GgmlDevice, ...] = ()  # every device ggml offers, CPU included

    @property
    def has_gpu(self) -> bool:
        return self.best_gpu is not None

    def gpu(self, want: str = "auto") -> GPUInfo | None:
        """The GPU a load goes to: see ggml_registry.choose_gpu ("auto", "none" or a device name)."""
        usable = [g for g in self.gpus if g.device]
        as_ggml = [GgmlDevice(g.device, g.name, g.backend, g.kind, g.free_bytes, g.total_bytes) for g in usable]
        chosen = choose_gpu(as_ggml, want)
        return next((g for g in usable if chosen and g.device == chosen.name), None)

    @property
    def best_gpu(self) -> GPUInfo | None:
        """The GPU "auto" picks: discrete before integrated, then the most free memory; llama.cpp
        plans are made for one device."""
        return self.gpu("auto")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["gpus"] = [asdict(g) for g in self.gpus]
        d["has_gpu"] = self.has_gpu
        d["backends"] = list(self.backends)
        d["skipped"] = dict(self.skipped)
        d["devices"] = [g.as_dict() for g in self.ggml_devices]
        del d["ggml_devices"]
        return d


class _NvmlProbe:
    """NVML initialised once; static facts cached, only memory read per sample."""

    def __init__(self, nvml=None):
        self.nvml = nvml if nvml is not None else pynvml
        self.handles: list = []
        self.names: list[str] = []
        self.driver: str | None = None
        self.error = ""
        self._init()

    def _init(self) -> None:
        if self.nvml is None:
            self.error = "NVML (nvidia-ml-py) is not installed"
            return
        try:
            self.nvml.nvmlInit()
            count = self.nvml.nvmlDeviceGetCount()
            self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.names = [_text(self.nvml.nvmlDeviceGetName(h)) for h in self.handles]
            self.driver = _text(self.nvml.nvmlSystemGetDriverVersion())
            if not count:
                self.error = "NVML found no NVIDIA GPU"
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable NVIDIA GPU
            self.handles, self.names = [], []
            self.error = _nvml_words(exc)
            log.debug("NVML unavailable: %s: %s (%s)", exc.__class__.__name__, exc, self.error)

    def sample(self) -> tuple[list[GPUInfo], str]:
        gpus, problems = [], []
        for i, (h, name) in enumerate(zip(self.handles, self.names)):
            try:
                m = self.nvml.nvmlDeviceGetMemoryInfo(h)
            except Exception as exc:  # a GPU can fall off the bus; report the rest
                problems.append(f"GPU {i}: {exc}")
                continue
            gpus.append(GPUInfo(i, name, "nvidia", int(m.total), int(m.free), int(m.used)))
        return gpus, "; ".join(problems)


# NVML's errors in words for a person (the Settings dialog shows them); the class name and NVML's
# own text go to the debug log. A missing library is the normal case without an NVIDIA card.
_NVML_WORDS = {
    "NVMLError_LibraryNotFound": "no NVIDIA driver installed",
    "NVMLError_DriverNotLoaded": "the NVIDIA driver is installed but not running",
    "NVMLError_NoPermission": "no permission to read the NVIDIA GPU",
    "NVMLError_LibRmVersionMismatch": "the NVIDIA driver was updated; restart the computer",
    "NVMLError_GpuIsLost": "the NVIDIA GPU stopped answering",
}


def _nvml_words(exc: Exception) -> str:
    return _NVML_WORDS.get(exc.__class__.__name__, "the NVIDIA driver did not answer")


def _no_gpu_note(snap: DeviceSnapshot, nvml_error: str) -> str:
    """Why no GPU is used ("" when one is)."""
    if snap.best_gpu is not None:
        return ""
    why = [f"{b} backend not loaded: {r}" for b, r in snap.skipped]
    unusable = [g.name for g in snap.gpus if not g.device]
    if unusable:
        why.insert(0, f"{', '.join(unusable)} found, but no GPU backend can use it")
    if any(g.software for g in snap.gpus):
        why.append("only a software Vulkan device (not used unless chosen by name)")
    if not why:
        why.append("no GPU device found" + (f" ({nvml_error})" if nvml_error else ""))
    return "; ".join(why)


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def _vendor(text: str) -> str:
    low = text.lower()
    return next((v for v, keys in (("nvidia", ("nvidia", "geforce", "quadro", "tesla")),
                                   ("amd", ("amd", "radeon")), ("intel", ("intel", "arc")),
                                   ("apple", ("apple",))) if any(k in low for k in keys)), "")


def _same_card(nvml_name: str, description: str) -> bool:
    a, b = nvml_name.lower().strip(), description.lower().strip()
    return bool(a) and (a in b or b in a)


def merge_gpus(ggml: list[GgmlDevice], nvml: list[GPUInfo]) -> list[GPUInfo]:
    """One GPUInfo per ggml GPU device, with NVML's memory figures for the card it names; then the
    NVIDIA cards no backend drives (device ""), so the report still shows them."""
    out, matched = [], set()  # (backend, NVML index): a card may be seen by CUDA and by Vulkan
    for i, d in enumerate(x for x in ggml if x.is_gpu):
        card = next((g for g in nvml if (d.backend, g.index) not in matched and _same_card(g.name, d.description)),
                    None)
        if card is not None:
            matched.add((d.backend, card.index))
            out.append(replace(card, index=i, backend=d.backend, device=d.name, kind=d.type,
                               memory_from="nvml"))
        else:
            out.append(GPUInfo(i, d.description or d.name, _vendor(d.description), d.total_bytes, d.free_bytes,
                               max(0, d.total_bytes - d.free_bytes), unified=d.type == "igpu",
                               backend=d.backend, device=d.name, kind=d.type, software=d.software,
                               memory_from="ggml"))
    seen = {index for _, index in matched}
    for g in nvml:
        if g.index not in seen:
            out.append(replace(g, index=len(out), memory_from="nvml"))
    return out


class DeviceMonitor:
    """Holds the cached probes; `snapshot()` samples only what changes.

    Args:
        nvml: an NVML module (tests pass a fake); default the real `pynvml`.
        ggml: ggml's registry (default the process's); None leaves it out (NVML/Apple only).
    """

    def __init__(self, nvml=None, ggml: Registry | None | bool = True):
        self._ggml = ggml_registry() if ggml is True else ggml or None
        self._proc = psutil.Process(os.getpid())
        self._cpu_logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
        self._cpu_physical = psutil.cpu_count(logical=False)
        self._apple = is_apple_silicon()
        self._platform = f"{platform.system()} {platform.machine()}"
        self._nvml = None if self._apple else _NvmlProbe(nvml)

    def snapshot(self) -> DeviceSnapshot:
        vm = psutil.virtual_memory()
        base = dict(timestamp=time.time(), cpu_logical=self._cpu_logical, cpu_physical=self._cpu_physical,
                    ram_total_bytes=int(vm.total), ram_available_bytes=int(vm.available),
                    process_rss_bytes=int(self._proc.memory_info().rss), platform=self._platform)
        ggml = self._ggml
        if ggml is not None:
            base.update(backends=tuple(ggml.backends()), skipped=tuple(ggml.skipped.items()),
                        cpu_variant=ggml.cpu_variant(),
                        ggml_devices=tuple(ggml.devices(memory_except=frozenset({"cuda"}) if self._nvml
                                                        and self._nvml.handles else frozenset())))
        if self._apple:
            # Unified memory: the GPU pool is RAM; Metal lets this process wire only a share of it,
            # and other programs' use already shows in `available`.
            total = int(vm.total * APPLE_GPU_SHARE)
            free = min(int(vm.available), total)
            metal = next((d for d in base.get("ggml_devices", ()) if d.backend == "metal"), None)
            gpu = GPUInfo(0, f"Apple {platform.processor() or 'Silicon'} GPU", "apple", total, free,
                          total - free, unified=True, backend="metal", device=metal.name if metal else "MTL0",
                          kind="igpu", memory_from="apple")
            return DeviceSnapshot(**base, gpus=(gpu,), gpu_backend="metal",
                                  note="unified memory: the GPU pool is shared with the CPU")
        nvml, problems = self._nvml.sample()
        if ggml is None:  # NVML only: every card it sees is assumed usable through CUDA
            gpus = [replace(g, backend="cuda", device=f"CUDA{g.index}", memory_from="nvml") for g in nvml]
        else:
            gpus = merge_gpus(list(base["ggml_devices"]), nvml)
        snap = DeviceSnapshot(**base, gpus=tuple(gpus), driver_version=self._nvml.driver)
        best = snap.best_gpu
        return replace(snap, gpu_backend=best.backend if best else "none",
                       note=problems or _no_gpu_note(snap, self._nvml.error))


_monitor: DeviceMonitor | None = None
_monitor_lock = threading.Lock()


def snapshot() -> DeviceSnapshot:
    """What the machine has now: CPU cores, RAM, this process's RSS, GPUs and their free memory.

    Never raises for a missing GPU or driver; `note` says why no GPU is listed.
    """
    global _monitor
    if _monitor is None:
        with _monitor_lock:
            if _monitor is None:
                _monitor = DeviceMonitor()
    return _monitor.snapshot()


def default_vram_budget_mb(snap: DeviceSnapshot, margin_mb: float = DEFAULT_MARGIN_MB, want: str = "auto") -> int:
    """Free memory of the chosen GPU minus a safety margin, in MiB; 0 without a GPU.

    Args:
        snap: a device snapshot.
        margin_mb: MiB left free for what the plan does not count (CUDA context growth, other apps).
        want: which GPU ("auto", "none" or a ggml device name), as DeviceSnapshot.gpu.
    """
    gpu = snap.gpu(want)
    if gpu is None:
        return 0
    return max(0, int(gpu.free_bytes // MIB - margin_mb))
