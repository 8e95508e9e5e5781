"""What the window says about a failed engine call: a user's action can cause some errors (a
deleted chat, a bad title, a full or read-only disk), said as they are; anything else is an
internal error, logged with its trace and said as one. Qt-free (app/chat_controller.py uses it)."""

from __future__ import annotations

import logging

from engine.api import ConversationNotFound, InputError, StorageError

log = logging.getLogger(__name__)
TURN_ERRORS = (InputError, ConversationNotFound, StorageError)
USER_ERRORS = TURN_ERRORS + (OSError, LookupError)


def said(exc: BaseException, expected: tuple = USER_ERRORS) -> str:
    """What the window says about a failed engine call (the trace of an unexpected one is logged)."""
    if isinstance(exc, expected):
        return str(exc)
    log.error("engine call failed", exc_info=exc)
    return f"internal error: {type(exc).__name__}: {exc}"
