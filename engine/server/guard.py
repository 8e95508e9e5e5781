"""The checks every request passes before an endpoint sees it (pure ASGI middleware, outermost first):

1. Host: the bound address or a loopback name, else 421 (a DNS-rebinding page names its own host;
   Jan's advisory: a server on 0.0.0.0 that accepted any Host).
2. Origin: browsers only from the configured origins, else 403; with no origins configured CORS
   is off and every cross-origin request (preflights included) is refused.
3. (CORS headers, when origins are configured: Starlette's CORSMiddleware.)
4. Key: `Authorization: Bearer <key>` on /v1, compared in constant time, else 401. Whether a
   request passed is `scope["x_keyed"]` (at the connection limit engine/server/protocol.py closes
   the connections without one first).
5. Body: at most `max_body_bytes` (413, before reading when Content-Length says so), read within
   `body_timeout_s` (408); the endpoint then gets the whole body at once. The open paths take no
   body: a declared one is 400 at once, unread. (A keyless `GET /health` declaring 1000 bytes it
   never sent waited 30 s in a request; 300 of them held every connection place.)
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/health"})  # no key and no body: a liveness probe learns nothing else
KEYED = "x_keyed"  # in the ASGI scope once the key is checked: True when this request passed


async def error(send: Send, status: int, message: str, kind: str, code: str | None = None,
                headers: dict[str, str] | None = None) -> None:
    """An OpenAI-shaped error; the connection closes (an unread body must not become the next request)."""
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"connection", b"close")]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


class HostGuard:
    def __init__(self, app: ASGIApp, allowed: frozenset[str]):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = _header(scope, b"host")
        if not self._ok(host, scope):
            log.warning("refused a request for Host %r from %s", host, scope.get("client"))
            return await error(send, 421, f"this server does not answer to the host {host!r}",
                               "invalid_request_error", "misdirected_request")
        await self.app(scope, receive, send)

    def _ok(self, host: str | None, scope: Scope) -> bool:
        if not host:
            return False
        try:
            parts = urlsplit("//" + host)
            port = parts.port
        except ValueError:
            return False
        if parts.hostname is None or parts.username is not None or parts.path:
            return False
        bound = (scope.get("server") or (None, None))[1]
        return parts.hostname.lower() in self.allowed and (port is None or port == bound)


class OriginGuard:
    def __init__(self, app: ASGIApp, origins: tuple[str, ...]):
        self.app, self.origins = app, frozenset(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = _header(scope, b"origin") if scope["type"] == "http" else None
        if origin is not None and origin not in self.origins and "*" not in self.origins:
            why = "cross-origin requests are off" if not self.origins else f"the origin {origin} is not allowed"
            return await error(send, 403, f"{why} (setting server.cors_origins)", "permission_error",
                               "origin_not_allowed")
        await self.app(scope, receive, send)


class KeyGuard:
    def __init__(self, app: ASGIApp, key: str):
        self.app, self.key = app, key.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope[KEYED] = False  # the open paths too: they ask for no key, so none is shown
        if scope["path"] not in OPEN_PATHS:
            given = _header(scope, b"authorization") or ""
            scheme, _, token = given.partition(" ")
            # compare_digest on bytes: its time does not depend on where the first difference is.
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode("latin-1"), self.key):
                return await error(send, 401, "a valid API key is needed: Authorization: Bearer <key>"
                                   " (the key is in the server's key file, or shown in Settings)",
                                   "authentication_error", "invalid_api_key", {"WWW-Authenticate": "Bearer"})
            scope[KEYED] = True
        await self.app(scope, receive, send)


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = _header(scope, b"content-length")
        declared = (length is not None and length.strip() != "0") or _header(scope, b"transfer-encoding") is not None
        if scope["path"] in OPEN_PATHS and declared:
            return await error(send, 400, f"{scope['path']} takes no request body", "invalid_request_error",
                               "unexpected_body")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large(send)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunks.append(message.get("body", b""))
                    size += len(chunks[-1])
                    if size > self.max_bytes:
                        return await self._too_large(send)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            return await error(send, 408, f"the request body did not arrive within {self.timeout_s:g} s",
                               "invalid_request_error", "request_timeout")
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await error(send, 413, f"the request body is larger than {self.max_bytes} bytes (setting server.max_body_mb)",
                    "invalid_request_error", "request_too_large")
