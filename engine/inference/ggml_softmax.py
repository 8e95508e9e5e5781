"""ggml's SIMD softmax sum, found in the CPU backend ggml loaded (no llama_cpp import: the seam,
engine/inference/llama_seam.py, hands it the library folder)."""

from __future__ import annotations

import ctypes
from pathlib import Path

from engine.models.ggml_registry import registry


def find_softmax_sum(lib_dir: Path):
    """ggml's SIMD `ggml_vec_soft_max_f32` (returns Σ exp(x - max)), or None if not exported.

    numpy's exp over a 262k vocabulary costs ~650 µs a token here; ggml's takes ~200 µs, which keeps
    the per-token logprob within the decode-speed budget. It lives in the CPU backend: the variant
    ggml loaded for this processor (libggml-cpu-haswell.so, ...), or libggml-cpu in a static build.
    It is ggml's internal symbol, not API: tests/test_llama_seam.py checks it against numpy.
    """
    cpu = registry().cpu_module()
    candidates = [cpu] if cpu else []
    candidates += [lib_dir / name for name in ("libggml-cpu.so", "libggml-cpu.dylib", "ggml-cpu.dll")]
    for path in candidates:
        try:
            fn = ctypes.CDLL(str(path)).ggml_vec_soft_max_f32
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_double
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float]
        return fn
    return None
