"""Large byte buffers that are not zeroed first.

`bytearray(n)` zeroes its n bytes while holding the GIL, and on a fresh mapping that also takes
every page fault there: 20 ms for 32 MB and 60 ms for 96 MB on the 2-core CI machine. A KV snapshot
is that large (taken after every turn, and when a chat leaves the context), and the GUI thread
waited that long for the interpreter (py-spy --gil during bench/gui_latency.py found the model thread
holding it in `bytearray(size)`). An unfilled buffer costs a malloc; its pages are then faulted in
by whoever writes them, llama.cpp or a file read, with the GIL released.
"""

from __future__ import annotations

import ctypes

_from_string_and_size = ctypes.pythonapi.PyByteArray_FromStringAndSize
_from_string_and_size.restype = ctypes.py_object
_from_string_and_size.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)


def unfilled(size: int) -> bytearray:
    """A bytearray of `size` bytes whose contents are whatever the allocator gave: for a caller
    that writes every byte before reading any, or cuts off what it did not write.

    Raises:
        ValueError: a negative size.
        MemoryError: the allocation failed.
    """
    if size < 0:
        raise ValueError(f"negative buffer size {size}")
    return _from_string_and_size(None, size)  # NULL: CPython allocates and copies nothing
