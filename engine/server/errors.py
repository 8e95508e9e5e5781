"""Engine errors in HTTP terms: status, OpenAI error type and code, one place for every endpoint."""

from __future__ import annotations

from engine.api import (ConversationNotFound, EmbedderNotReady, InputError, MessageTooLong, ModelLoadError,
                        ModelNotFound, RemoteError, StorageError, ToolError)
from engine.server.fair_queue import QueueClosed, QueueFull
from engine.server.schema import RequestError

# What a user or the machine can cause (said, not logged as a bug); anything else is an internal error.
EXPECTED = (RequestError, InputError, ToolError, ModelNotFound, ModelLoadError, RemoteError, StorageError, EmbedderNotReady,
            QueueFull, QueueClosed)


def describe(exc: BaseException) -> tuple[int, str, str | None, dict[str, str]]:
    """(HTTP status, OpenAI error type, code, extra headers) for an exception."""
    if isinstance(exc, RequestError):
        return exc.status, exc.kind, exc.code, {}
    if isinstance(exc, QueueFull):
        return 429, "rate_limit_error", exc.code, {"Retry-After": str(exc.retry_after_s)}
    if isinstance(exc, QueueClosed):
        return 503, "server_error", "shutting_down", {}
    if isinstance(exc, MessageTooLong):
        return 400, "invalid_request_error", "context_length_exceeded", {}
    if isinstance(exc, (InputError, ToolError)):  # ToolError: tools or calls refused (its param names them)
        return 400, "invalid_request_error", None, {}
    if isinstance(exc, RemoteError):
        return 502, "server_error", f"l3_{exc.kind}", {}
    if isinstance(exc, (ModelNotFound, ModelLoadError)):
        return 503, "server_error", "model_unavailable", {}
    if isinstance(exc, EmbedderNotReady):
        return 503, "server_error", "embedder_not_ready", {}
    if isinstance(exc, StorageError):
        return 503, "server_error", "storage", {}
    if isinstance(exc, ConversationNotFound):
        return 409, "invalid_request_error", "conversation_gone", {}
    return 500, "server_error", None, {}


def body(exc: BaseException) -> dict:
    status, kind, code, _ = describe(exc)
    message = exc.message if isinstance(exc, RequestError) else str(exc) if status < 500 or isinstance(
        exc, EXPECTED) else f"internal error ({type(exc).__name__}); the server log has the details"
    return {"error": {"message": message, "type": kind, "param": getattr(exc, "param", None), "code": code}}
