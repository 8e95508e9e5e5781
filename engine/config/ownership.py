"""Which thread owns an object, and a check that says so when another thread calls it.

Each native object has one owner (docs/architecture.md, "Threads and what each owns"): a model's
`Backend` belongs to the model's thread, an `Assistant` to the front-end thread that drives it. A
call from any other thread is a race that may work for months and then corrupt a KV cache. The
owned methods call `check_owner`; it does nothing unless the check is on (`enable()`, or
ASSISTANT_CHECK_OWNERS=1 in the environment; the test suite turns it on), and then raises
`WrongThread` naming both threads, on the day the slip is written.

The owner is the thread that created the object (`adopt` in its constructor) until it is handed to
another with `hand_over`: a model's thread takes its backend over from the thread that loaded it.
An object nobody owns (handed to None) may be called from any thread.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable, TypeVar

_ENABLED = os.environ.get("ASSISTANT_CHECK_OWNERS", "") not in ("", "0")
_OWNER = "_owner_thread"  # the attribute that holds an object's owner

F = TypeVar("F", bound=Callable[..., Any])


class WrongThread(RuntimeError):
    """An owned object was called from a thread other than its owner's."""


def enable(on: bool = True) -> None:
    """Turn the check on (tests) or off; off by default, where it costs one flag test per call."""
    global _ENABLED
    _ENABLED = on


def enabled() -> bool:
    return _ENABLED


def adopt(obj: Any) -> None:
    """The calling thread owns `obj` from now on (constructors call this)."""
    hand_over(obj, threading.current_thread())


def hand_over(obj: Any, thread: threading.Thread | None) -> None:
    """`thread` owns `obj` from now on (it may not have started yet); None: nobody does. Only the
    owner should hand an object over, at a point after which it no longer touches it."""
    setattr(obj, _OWNER, thread)


def owner_of(obj: Any) -> threading.Thread | None:
    return getattr(obj, _OWNER, None)


def check_owner(obj: Any) -> None:
    """Raise WrongThread if the check is on, `obj` has an owner and the caller is another thread."""
    if not _ENABLED:
        return
    thread = getattr(obj, _OWNER, None)
    if thread is None or thread.ident == threading.get_ident():
        return
    here = threading.current_thread()
    raise WrongThread(f"{type(obj).__name__} belongs to thread {thread.name!r} but was called from thread "
                      f"{here.name!r}; post the call to its owner (docs/architecture.md, threads)")


def owned(method: F) -> F:
    """Decorate a method that only the object's owner may call."""
    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        if _ENABLED:
            check_owner(self)
        return method(self, *args, **kwargs)
    return checked  # type: ignore[return-value]
