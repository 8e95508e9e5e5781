"""Where a model's layers go: the one ggml device a load is given, and what llama.cpp reports it
offloaded. Talks to ggml through the registry (engine/models/ggml_registry.py); the llama_cpp
ctypes module is handed in by engine/inference/backend.py, the only module that imports it."""

from __future__ import annotations

import ctypes
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


class model_devices:
    """Sets llama_model_params.devices for the Llama() built inside (llama-cpp-python has no
    argument for it): wraps `llama_c.llama_model_default_params`, which Llama.__init__ calls first.
    The caller serialises loads, so the wrapper is never seen by another load.

    Args:
        llama_c: llama-cpp-python's ctypes module (`llama_cpp.llama_cpp`).
        devices: from device_list; None changes nothing.
    """

    def __init__(self, llama_c, devices: list[int] | None):
        self.llama_c, self.devices = llama_c, devices

    def __enter__(self) -> None:
        if self.devices is None:
            return
        array = (ctypes.c_void_p * (len(self.devices) + 1))(*self.devices, None)  # NULL-terminated
        self._array = array  # alive until the load is done
        self._original = original = self.llama_c.llama_model_default_params

        def with_devices():
            params = original()
            params.devices = ctypes.cast(array, ctypes.c_void_p)
            return params

        self.llama_c.llama_model_default_params = with_devices

    def __exit__(self, *exc) -> None:
        if self.devices is not None:
            self.llama_c.llama_model_default_params = self._original
