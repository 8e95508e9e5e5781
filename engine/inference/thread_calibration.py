"""A model's best thread counts on this machine, measured once and remembered.

Decode (one token a step) is bound by memory bandwidth and often peaks below one thread per core;
a prompt batch is bound by arithmetic and wants every core. So both are timed, at a few candidate
counts, right after a load: a warm-up step, then DECODE_STEPS one-token steps and one
BATCH_TOKENS-token batch per count (demo-small: ~0.1 s in all; a 1.5B Q4_K_M on two cores ~1 s).
The result is kept in `cpu_calibration.json` in the user directory, under the model's identity,
the CPU and the llama.cpp build, and in memory for the process. A calibration that ran while other
programs were busy is used but not kept: the next load measures again.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from engine.config.locked_file import locked, write_atomic
from engine.inference.cpu_facts import CpuFacts

log = logging.getLogger(__name__)

DECODE_STEPS = 2
BATCH_TOKENS = 8
QUIET_CPUS = 0.3   # other programs' use below which a calibration is kept
TIE = 0.03         # the most threads within 3 % of the fastest: a fewer-thread pick must beat noise
FILE = "cpu_calibration.json"


@dataclass(frozen=True)
class Calibration:
    decode: dict[int, float]  # tok/s by thread count, one token a step
    batch: dict[int, float]   # tok/s by thread count, a BATCH_TOKENS batch
    others: float = 0.0       # other programs' CPU use while it ran, in CPUs
    seconds: float = 0.0      # what it took
    cached: bool = field(default=False, compare=False)

    @property
    def best_decode(self) -> int:
        return best_count(self.decode)

    @property
    def best_batch(self) -> int:
        return best_count(self.batch)


def best_count(rates: dict[int, float]) -> int:
    """The thread count to run from measured tok/s by count."""
    top = max(rates.values())
    return max(n for n, r in rates.items() if r >= top * (1 - TIE))


def candidates(cpu: CpuFacts) -> tuple[list[int], list[int]]:
    """Thread counts to try: (decode, batch). At most four for decode, a quarter-step ladder up to
    one per performance core; a batch tries half and all of them, and every logical CPU where
    SMT doubles them (a batch can use a core's second thread, decode rarely does)."""
    top = cpu.top
    decode = sorted({max(1, top // 4), max(1, top // 2), max(1, top * 3 // 4), top})
    batch = sorted({max(1, top // 2), top} | ({cpu.usable} if cpu.usable > cpu.physical else set()))
    return decode, batch


def measure(set_threads: Callable[[int, int], None], step: Callable[[list[int]], None], reset: Callable[[], None],
            cpu: CpuFacts, meter, clock: Callable[[], float] = time.perf_counter, token: int = 1) -> Calibration:
    """Time `step` (an evaluation after the cache's contents) at each candidate count; the cache is
    left empty. `token`: an id to evaluate (any valid one: only the time matters)."""
    decode_counts, batch_counts = candidates(cpu)
    start = clock()
    meter.read()
    reset()
    set_threads(decode_counts[-1], batch_counts[-1])
    step([token] * 2)  # the first evaluation allocates the compute buffers
    decode: dict[int, float] = {}
    for n in decode_counts:
        set_threads(n, n)
        t = clock()
        for _ in range(DECODE_STEPS):
            step([token])
        decode[n] = DECODE_STEPS / max(clock() - t, 1e-9)
    batch: dict[int, float] = {}
    for n in batch_counts:
        set_threads(n, n)
        reset()
        t = clock()
        step([token] * BATCH_TOKENS)
        batch[n] = BATCH_TOKENS / max(clock() - t, 1e-9)
    reset()
    others, _ = meter.read()
    return Calibration(decode, batch, others, clock() - start)


class CalibrationStore:
    """Calibrations by key: in memory for the process, on disk (`path`) across runs."""

    def __init__(self):
        self._memory: dict[str, Calibration] = {}

    def get(self, path: Path, key: str) -> Calibration | None:
        found = self._memory.get(key)
        if found is not None:
            return found
        try:
            raw = json.loads(path.read_text(encoding="utf-8")).get(key)
            found = _parse(raw) if raw is not None else None
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring %s (%s): the model will be calibrated again", path, exc)
            return None
        if found is not None:
            self._memory[key] = found
        return found

    def put(self, path: Path, key: str, cal: Calibration) -> None:
        if cal.others > QUIET_CPUS:
            log.info("calibration not kept: other programs used %.1f CPUs meanwhile", cal.others)
            return
        self._memory[key] = cal
        try:
            with locked(path):
                try:
                    data = json.loads(path.read_text(encoding="utf-8"))
                    data = data if isinstance(data, dict) else {}
                except (OSError, ValueError):
                    data = {}
                entry = asdict(cal)
                del entry["cached"]
                data[key] = entry | {"at": time.time()}
                write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))
        except OSError as exc:  # a read-only home still gets this process's memory
            log.warning("could not keep the calibration in %s: %s", path, exc)

    def entries(self, path: Path) -> dict[str, Calibration]:
        """Every kept calibration that reads whole (for `assistant devices`)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        out = {}
        for key, raw in (data.items() if isinstance(data, dict) else ()):
            try:
                if (found := _parse(raw)) is not None:
                    out[key] = found
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # an entry of another version's shape
        return out


def _parse(raw: dict) -> Calibration | None:
    """A kept entry; None when it has no rates. Raises on a damaged one."""
    found = Calibration({int(k): float(v) for k, v in raw["decode"].items()},
                        {int(k): float(v) for k, v in raw["batch"].items()},
                        float(raw.get("others", 0.0)), float(raw.get("seconds", 0.0)), cached=True)
    return found if found.decode and found.batch else None


STORE = CalibrationStore()
