"""The CPUs a model's threads may use, and what other programs are doing with them.

`cpu_facts()` says how many CPUs this process may run on (its affinity mask), how many physical
cores they are (SMT siblings count once) and, on a hybrid Intel CPU, how many of those are
performance cores: llama.cpp's threads meet at a barrier after every operation, so a thread on a
slow E-core or sharing a core with its sibling holds all of them back.

`LoadMeter` reads other programs' CPU use between two readings (all CPU time spent on our CPUs
minus this process's own), in CPUs: 1.0 is one CPU kept busy. That is the contention signal
engine/inference/thread_policy.py acts on.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import psutil

SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuFacts:
    usable: int       # logical CPUs in this process's affinity mask
    physical: int     # physical cores among them
    performance: int  # performance cores among them (a hybrid CPU's P-cores); = physical otherwise
    name: str         # the CPU's model name: part of a calibration's key

    @property
    def top(self) -> int:
        """The most threads worth running: one per performance core."""
        return max(1, self.performance)


def affinity() -> list[int]:
    """The logical CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        try:
            return sorted(psutil.Process().cpu_affinity())
        except (AttributeError, psutil.Error):  # macOS: no affinity at all
            return list(range(psutil.cpu_count(logical=True) or os.cpu_count() or 1))


def _cpu_list(text: str) -> set[int]:
    """Linux's CPU list syntax ("0-3,8,10-11")."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _linux_cores(cpus: list[int], root: Path) -> tuple[int, int] | None:
    """(physical cores, performance cores) among `cpus` from sysfs; None where it is not there."""
    cores: dict[tuple[str, str], int] = {}
    for cpu in cpus:
        topo = root / f"cpu{cpu}" / "topology"
        try:
            key = ((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip())
        except OSError:
            return None
        cores.setdefault(key, cpu)
    # A hybrid Intel CPU lists its P-cores' CPUs under cpu_core (E-cores under cpu_atom).
    try:
        big = _cpu_list((root.parent.parent / "cpu_core" / "cpus").read_text())
    except (OSError, ValueError):
        big = None
    physical = len(cores)
    performance = sum(1 for cpu in cores.values() if cpu in big) if big else physical
    return physical, performance or physical


def _name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def cpu_facts(root: Path = SYS_CPU) -> CpuFacts:
    cpus = affinity()
    logical = psutil.cpu_count(logical=True) or len(cpus)
    found = _linux_cores(cpus, root) if root.is_dir() else None
    if found is None:  # elsewhere: psutil's machine-wide count, scaled to the CPUs we may use
        whole = psutil.cpu_count(logical=False) or logical
        physical = max(1, round(whole * len(cpus) / logical))
        found = (physical, physical)
    return CpuFacts(usable=len(cpus), physical=found[0], performance=found[1], name=_name())


class LoadMeter:
    """Other programs' CPU use, in CPUs, between one `read()` and the next.

    Args:
        cpus: the logical CPUs to watch (default: this process's affinity).
        clock: seconds, monotonic (tests pass a fake, with `times`).
        times: () -> (busy CPU-seconds on `cpus`, this process's CPU-seconds).
    """

    def __init__(self, cpus: list[int] | None = None, clock: Callable[[], float] = time.monotonic,
                 times: Callable[[], tuple[float, float]] | None = None):
        self.cpus = cpus if cpus is not None else affinity()
        self._watched = set(self.cpus)
        self._clock = clock
        self._times = times or self._psutil_times
        self._proc = psutil.Process()
        self._last = (clock(), *self._times())

    def _psutil_times(self) -> tuple[float, float]:
        per = psutil.cpu_times(percpu=True)
        # Everything but idle and I/O wait; steal (a VM's host taking the CPU) is contention too.
        busy = sum(t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
                   + getattr(t, "steal", 0.0) for i, t in enumerate(per) if i in self._watched)
        own = self._proc.cpu_times()
        return busy, own.user + own.system

    def read(self) -> tuple[float, float]:
        """(other programs' CPUs, seconds since the last reading)."""
        now, busy, own = self._clock(), *self._times()
        then, busy0, own0 = self._last
        self._last = (now, busy, own)
        span = now - then
        if span <= 0:
            return 0.0, 0.0
        return max(0.0, min(len(self.cpus), ((busy - busy0) - (own - own0)) / span)), span
