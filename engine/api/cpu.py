"""What `assistant devices` says of the CPU threads: the CPUs this process may use, what other
programs take of them now, how many threads a model would run, and each model's calibration."""

from __future__ import annotations

import time
from dataclasses import asdict

from engine.config.paths import user_dir
from engine.inference.cpu_facts import LoadMeter, cpu_facts
from engine.inference.thread_calibration import FILE, STORE
from engine.inference.thread_policy import cap


def cpu_threads_report(manual: int = 0, sample_s: float = 0.3) -> dict:
    """Args:
        manual: the Settings override (runtime.n_threads; 0 = automatic).
        sample_s: how long other programs' CPU use is sampled.

    Returns: {"cpu": {usable, physical, performance, name}, "others": CPUs other programs use now,
    "threads_now": what an automatic model would cap at now, "manual": manual,
    "calibrations": [{"model", "cpu", "gpu_layers", "decode", "batch", "best_decode", "best_batch"}]}.
    """
    cpu = cpu_facts()
    meter = LoadMeter()
    time.sleep(sample_s)
    others, _ = meter.read()
    cals = []
    for key, cal in sorted(STORE.entries(user_dir() / FILE).items()):
        try:
            model, cpu_name, _usable, layers, _version = key.split("|")
            gpu_layers = int(layers)
        except ValueError:
            continue  # a key of another version's shape
        cals.append({"model": model.split(":")[0], "cpu": cpu_name, "gpu_layers": gpu_layers, "decode": cal.decode,
                     "batch": cal.batch, "best_decode": cal.best_decode, "best_batch": cal.best_batch})
    return {"cpu": asdict(cpu), "others": others, "threads_now": min(cap(cpu.usable, others), cpu.top), "manual": manual,
            "calibrations": cals}
