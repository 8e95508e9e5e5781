"""What llama.cpp says about a load, read from its log: the buffers it allocated, the layers it
offloaded, and whether a device ran out of memory.

llama.cpp states these only as log lines ("load_tensors: CPU_Mapped model buffer size = 92.10 MiB",
"llama_kv_cache: CPU KV buffer size = 45.00 MiB", "sched_reserve: CPU compute buffer size = 99.38
MiB", "load_tensors: offloaded 31/31 layers to GPU"); engine/inference/llama_seam.py's `LoadLog`
receives them through llama.cpp's log callback (llama_log_set) while a model loads.

Why regexes and not an API: llama.h (this wheel's, 0.3.36) has no call that reports allocations by
buffer type. `llama_get_memory_breakdown` exists only in the internal C++ header llama-ext.h and
returns a std::map (not reachable through ctypes), and its kinds (model / context / compute) lump
the KV cache with the output buffer and say nothing of cells, layers, cache types or offloaded
layers. ggml's buffer sizes (ggml_backend_buffer_get_size) need the buffers, which llama.cpp keeps
to itself. The one exact number llama.h gives, llama_model_size (Σ tensor bytes), is read beside
this report. tests/test_llama_seam.py loads a demo model and checks this parser still finds the
weights, KV and compute buffers, so a reworded log line fails there.
"""

from __future__ import annotations

import re

_BUFFER_LINE = re.compile(r"(\S+)\s+(model|KV|RS|compute|output) buffer size =\s*([\d.]+) MiB")
_KV_LINE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers.*"
                      r"K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB")
_OFFLOAD_LINE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# What llama.cpp / ggml log when a device buffer cannot be had (Vulkan, CUDA, Metal wordings).
_DEVICE_OOM = re.compile(r"failed to allocate|unable to allocate|out of memory|OutOfDeviceMemory|"
                         r"ErrorOutOfHostMemory|cudaMalloc failed", re.IGNORECASE)
_MIB = 1024 * 1024


def device_out_of_memory(log_text: str) -> bool:
    """Whether a load's log says a device buffer could not be allocated."""
    return bool(_DEVICE_OOM.search(log_text))


def parse_memory_report(log_text: str) -> dict:
    """Bytes llama.cpp allocated at load, by kind and buffer type, from its log lines.

    Sizes are logged in MiB with two decimals, so each is exact to about ±5 KiB.
    """
    kinds = {"model": "weights", "KV": "kv", "RS": "kv", "compute": "compute", "output": "output"}
    report: dict = {k: {} for k in ("weights", "kv", "compute", "output")}
    report["kv_caches"] = []
    for line in log_text.splitlines():
        m = _BUFFER_LINE.search(line)
        if m:
            buft, kind, size = m.group(1), kinds[m.group(2)], round(float(m.group(3)) * _MIB)
            by_buft = report[kind]
            # weights and KV can come in several buffers of one type (split files, SWA + full caches);
            # a compute or output buffer logged twice was re-reserved: the last size holds.
            by_buft[buft] = by_buft.get(buft, 0) + size if kind in ("weights", "kv") else size
        m = _KV_LINE.search(line)
        if m:
            report["kv_caches"].append({
                "bytes": round(float(m.group(1)) * _MIB), "cells": int(m.group(2)), "layers": int(m.group(3)),
                "type_k": m.group(4), "type_v": m.group(6)})
        m = _OFFLOAD_LINE.search(line)
        if m:
            report["layers_offloaded"], report["layers_total"] = int(m.group(1)), int(m.group(2))
    for kind in ("weights", "kv", "compute", "output"):
        report[f"{kind}_bytes"] = sum(report[kind].values())
    report["weights_repack_bytes"] = sum(v for k, v in report["weights"].items() if k.endswith("_REPACK"))
    return report
