"""KV snapshots go back to the operating system when freed (glibc).

glibc serves an allocation of 128 KiB or more with its own mmap and unmaps it on free, but each
time such a block is freed it raises that threshold (up to 32 MiB). After a few turns the KV
snapshots (a few MB each, copied after every turn, dropped when a conversation goes or is restored)
came from the heap instead, whose freed holes are seldom returned: a server's RSS rose by 250 MiB
over 1 500 API requests while the snapshots it held stayed at 260 MiB (bench/soak_api.py on
demo-small; flat with the threshold set). Setting the threshold also stops glibc from raising it.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD_BYTES = 1 << 20  # blocks this large are mmapped, and unmapped when freed

_pinned = False


def pin_mmap_threshold() -> bool:
    """Set glibc's mmap threshold once per process; False where there is no glibc (macOS,
    Windows, musl), whose allocators need no such setting here."""
    global _pinned
    if _pinned or not sys.platform.startswith("linux"):
        return _pinned
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _pinned = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    if not _pinned:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused: not glibc")
    return _pinned
