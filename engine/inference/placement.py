"""Where a model's layers go: the one ggml device a load is given, and what llama.cpp reports it
offloaded. Talks to ggml through the registry (engine/models/ggml_registry.py); the device pointers
go into llama_model_params.devices in engine/inference/llama_seam.py, the only llama_cpp import."""

from __future__ import annotations

import re

from engine.models.ggml_registry import choose_gpu, registry


class NoSuchDevice(ValueError):
    """A load named a GPU device this machine does not have."""


def device_list(n_gpu_layers: int, gpu_device: str | None) -> list[int] | None:
    """ggml device pointers for llama_model_params.devices: [] keeps the model off every device
    (a CPU plan, or no real GPU for "auto"); one pointer otherwise.

    Args:
        gpu_device: a ggml device name ("Vulkan0"); None = the planner's "auto" choice, which is
            never a software rasteriser.

    Raises:
        NoSuchDevice: `gpu_device` is not among ggml's devices.
    """
    if n_gpu_layers <= 0:
        return []
    name = gpu_device
    if not name:
        chosen = choose_gpu(registry().devices(memory=False))
        if chosen is None:
            return []
        name = chosen.name
    handle = registry().device_handle(name)
    if handle is None:
        names = [d.name for d in registry().devices(memory=False)]
        raise NoSuchDevice(f"no GPU device named {name!r} (this machine has: {', '.join(names) or 'none'})")
    return [handle]


def offload_facts(report: dict, gpu_device: str | None, n_layers: int) -> dict:
    """Where the layers went, from llama.cpp's load report ("offloaded 31/31 layers to GPU")."""
    on_device = report.get("layers_offloaded", 0)
    device = None
    if on_device:  # the buffer llama.cpp filled is named after the device ("Vulkan0", "CUDA0")
        device = gpu_device or next((b for b in report["weights"] if not b.startswith("CPU")), None)
    backend = "cpu"
    if device:
        backend = next((d.backend for d in registry().devices(memory=False) if d.name == device),
                       re.sub(r"\d+$", "", device).lower())
    return {"backend": backend, "device": device, "n_gpu_layers": on_device,
            "n_layers": report.get("layers_total", n_layers)}
