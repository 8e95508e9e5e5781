"""Device detection: NVIDIA GPUs through NVML, Apple Silicon unified memory, CPU and RAM.

`snapshot()` is cheap enough for a live gauge (a few NVML and /proc reads, no process spawn):
NVML is initialised once per process and device handles, names and the driver version are
cached. A machine without a GPU or without the NVML library gets a clean CPU-only report.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass

import psutil

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
    vendor: str  # "nvidia" | "apple"
    total_bytes: int
    free_bytes: int
    used_bytes: int
    unified: bool = False  # memory shared with the CPU (Apple Silicon)


@dataclass(frozen=True)
class DeviceSnapshot:
    timestamp: float  # time.time()
    cpu_logical: int
    cpu_physical: int | None
    ram_total_bytes: int
    ram_available_bytes: int
    process_rss_bytes: int
    gpus: tuple[GPUInfo, ...] = ()
    gpu_backend: str = "none"  # "cuda" | "metal" | "none": what llama.cpp would offload to
    driver_version: str | None = None
    note: str = ""  # why there is no GPU, or what went wrong reading it
    platform: str = ""  # "Linux x86_64", "Darwin arm64"

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def best_gpu(self) -> GPUInfo | None:
        """The GPU with the most free memory (llama.cpp plans are made for one device)."""
        return max(self.gpus, key=lambda g: g.free_bytes, default=None)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["gpus"] = [asdict(g) for g in self.gpus]
        d["has_gpu"] = self.has_gpu
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
            self.error = f"no NVIDIA GPU: {exc.__class__.__name__}: {exc}"
            log.debug("NVML unavailable: %s", self.error)

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


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


class DeviceMonitor:
    """Holds the cached probes; `snapshot()` samples only what changes.

    Args:
        nvml: an NVML module (tests pass a fake); default the real `pynvml`.
    """

    def __init__(self, nvml=None):
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
        if self._apple:
            # Unified memory: the GPU pool is RAM; Metal lets this process wire only a share of it,
            # and other programs' use already shows in `available`.
            total = int(vm.total * APPLE_GPU_SHARE)
            free = min(int(vm.available), total)
            gpu = GPUInfo(0, f"Apple {platform.processor() or 'Silicon'} GPU", "apple", total, free,
                          total - free, unified=True)
            return DeviceSnapshot(**base, gpus=(gpu,), gpu_backend="metal",
                                  note="unified memory: the GPU pool is shared with the CPU")
        gpus, problems = self._nvml.sample()
        note = problems or ("" if gpus else self._nvml.error)
        return DeviceSnapshot(**base, gpus=tuple(gpus), gpu_backend="cuda" if gpus else "none",
                              driver_version=self._nvml.driver, note=note)


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


def default_vram_budget_mb(snap: DeviceSnapshot, margin_mb: float = DEFAULT_MARGIN_MB) -> int:
    """Free memory of the best GPU minus a safety margin, in MiB; 0 without a GPU.

    Args:
        snap: a device snapshot.
        margin_mb: MiB left free for what the plan does not count (CUDA context growth, other apps).
    """
    gpu = snap.best_gpu
    if gpu is None:
        return 0
    return max(0, int(gpu.free_bytes // MIB - margin_mb))
