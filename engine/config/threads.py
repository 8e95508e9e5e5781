"""Threads the engine starts with a stack of a known size, whatever the platform.

A thread's default stack differs by platform: 8 MiB on Linux (ulimit -s), 1 MiB on Windows (the
executable's header), 512 KiB for a thread macOS makes (CPython asks 16 MiB there; an embedding
program may not). llama.cpp's GBNF parser recurses once per nested group of a grammar, and the
threads that parse grammars (each model's own, and the check of a request's grammar) would
otherwise have whatever the platform gives: issue 37's `"maxLength": 100000` overflowed one.
"""

from __future__ import annotations

import threading

STACK_BYTES = 16 << 20  # reserved address space; pages are committed only as deep as the stack goes
_lock = threading.Lock()


def start(thread: threading.Thread) -> threading.Thread:
    """Start `thread` with a stack of STACK_BYTES. (`threading.stack_size` is process-wide and read
    when a thread starts: it is set for this start only, under a lock.)"""
    with _lock:
        previous = threading.stack_size(STACK_BYTES)
        try:
            thread.start()
        finally:
            threading.stack_size(previous)
    return thread


def run(fn, name: str = "big-stack"):
    """fn() on a thread `name` of its own started with STACK_BYTES, waited for: its value, or its
    exception raised here."""
    box: dict = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            box["error"] = exc

    start(threading.Thread(target=call, name=name, daemon=True)).join()
    if "error" in box:
        raise box["error"]
    return box.get("value")
