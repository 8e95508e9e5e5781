"""A stop flag llama.cpp's CPU backend reads between the nodes of a graph, with no Python in the way.

ggml calls a context's abort callback `bool (*)(void *data)` after every node, on a compute
thread. A Python callback there would take the GIL a thousand times per prompt piece and wait for
it whenever another thread runs Python. The callback is C's `strlen` instead, and the data a
two-byte buffer: it returns 0 while the first byte is 0 and 1 once it is 1, and the caller reads
the low byte of the return register as the bool on every ABI the wheels are built for (x86-64,
arm64). engine/inference/llama_seam.py installs it (`Context.abort`).
"""

from __future__ import annotations

import ctypes
import sys


def _strlen_address() -> int:
    libc = ctypes.CDLL("ucrtbase") if sys.platform == "win32" else ctypes.CDLL(None)  # already loaded
    return ctypes.cast(libc.strlen, ctypes.c_void_p).value


class AbortFlag:
    """The byte, and the C function that reads it (`callback`, `data`: for llama_set_abort_callback)."""

    def __init__(self):
        self._byte = ctypes.create_string_buffer(2)
        self.callback = _strlen_address()
        self.data = ctypes.cast(self._byte, ctypes.c_void_p)

    def set(self) -> None:
        self._byte[0] = b"\x01"

    def clear(self) -> None:
        self._byte[0] = b"\x00"

    def is_set(self) -> bool:
        return self._byte.raw[0] != 0
