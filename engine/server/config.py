"""What the local API server is allowed to do: where it binds, its key, its limits.

Secure by default (issue 16): loopback only, a key always, CORS off, bounded bodies, queues and
request times. A non-loopback address needs `allow_network` as well as the key.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from engine.api import Settings, locked, user_dir, write_atomic
from engine.server.tools import MAX_TOOL_TOKENS

log = logging.getLogger(__name__)

KEY_FILE = "server_api_key"  # in the data dir, mode 0600
MIN_KEY_CHARS = 16
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


class ServerConfigError(ValueError):
    """A setting or flag the server refuses to start with (the message says what to change)."""


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def api_key_path() -> Path:
    return user_dir() / KEY_FILE


def load_api_key(create: bool = True) -> str | None:
    """The server's stored API key; with `create`, one is made (`secrets.token_urlsafe`) and
    stored 0600 the first time. A key file others could read is made the user's only again.
    Servers starting together (the window's, `assistant serve`) all get the one key stored."""
    path = api_key_path()
    key = _stored_key(path)
    if key or not create:
        return key
    with locked(path):
        return _stored_key(path) or _store_new_key(path)  # another process may have just made it


def new_api_key() -> str:
    """Make a new API key and store it 0600 in place of the old one (which stops working at the
    server's next start); returns it."""
    path = api_key_path()
    with locked(path):
        return _store_new_key(path)


def _stored_key(path: Path) -> str | None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("%s was readable by other users (mode %o); it is now the user's only", path, mode)
            os.chmod(path, 0o600)
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def _store_new_key(path: Path) -> str:
    key = secrets.token_urlsafe(32)
    write_atomic(path, (key + "\n").encode("utf-8"), mode=0o600)
    log.info("a new API key was stored in %s", path)
    return key


def client_url(host: str, port: int) -> str:
    """The base URL a program on this computer uses for a server bound to `host`:`port` (a
    wildcard bind is reached on 127.0.0.1)."""
    host = "127.0.0.1" if host in WILDCARDS else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/v1"


def parse_origins(text: str) -> tuple[str, ...]:
    """"https://a.example, http://localhost:3000" → the origins, without trailing slashes."""
    return tuple(o.rstrip("/") for o in text.replace(",", " ").split() if o)


@dataclass(frozen=True)
class ServerConfig:
    """Args:
        host, port: where to listen (port 0: any free port).
        api_key: required in `Authorization: Bearer <key>` on every /v1 request.
        allow_network: may listen on a non-loopback address.
        cors_origins: browser origins allowed to call the API; empty: CORS off.
        store_conversations: API conversations stay in the chat list; off: deleted once the
            server no longer reuses them (and at exit).
        allow_memory: clients may use the user's memory (x_memory); off: x_memory gets 403. The
            user grants it (Settings), never a client.
        allow_docs: clients may read the user's documents (x_docs); off: x_docs gets 403.
        max_body_bytes, max_messages: a larger request gets 413 / 400.
        queue_depth: requests waiting for the engine; one more gets 429, and so does a client's
            request past half of them (engine/server/fair_queue.py).
        max_embedding_tokens: tokens one embeddings request may cost, each input counted up to the
            model's limit (256); more get 400 (~1-2 min of one core at this limit).
        max_tool_tokens: tokens a request's tools may add to its prompt; more get 400.
        request_timeout_s: a request's whole time, queue included; then its turn is cancelled.
        header_timeout_s, body_timeout_s: time to send the request headers / the body (slowloris).
        max_connections: open connections at once; at the limit a new one closes the oldest that
            is not in a request (engine/server/protocol.py), and only when every one is in a
            request does uvicorn answer 503.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    api_key: str = ""
    allow_network: bool = False
    cors_origins: tuple[str, ...] = ()
    store_conversations: bool = False
    allow_memory: bool = False
    allow_docs: bool = False
    max_body_bytes: int = 8 * 1024 * 1024
    max_messages: int = 1000
    queue_depth: int = 16
    request_timeout_s: float = 600.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 256
    max_embedding_tokens: int = 131_072  # 512 inputs of 256 tokens, or 2 048 of 64
    max_tool_tokens: int = MAX_TOOL_TOKENS
    extra_hosts: tuple[str, ...] = field(default=())  # more Host names to accept (a network bind's own)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides) -> "ServerConfig":
        values = dict(
            host=settings.get("server.host"), port=settings.get("server.port"),
            allow_network=settings.get("server.allow_network"),
            cors_origins=parse_origins(settings.get("server.cors_origins")),
            store_conversations=settings.get("server.store_conversations"),
            allow_memory=settings.get("server.allow_memory"), allow_docs=settings.get("server.allow_docs"),
            max_body_bytes=int(settings.get("server.max_body_mb") * 1024 * 1024),
            max_messages=settings.get("server.max_messages"), queue_depth=settings.get("server.queue_depth"),
            request_timeout_s=float(settings.get("server.request_timeout_s")),
            max_tool_tokens=settings.get("server.max_tool_tokens"))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def check(self) -> None:
        """Raises ServerConfigError for a start the defaults forbid."""
        if not self.api_key:
            raise ServerConfigError("the server needs an API key")
        if len(self.api_key) < MIN_KEY_CHARS:
            raise ServerConfigError(f"the API key is too short: at least {MIN_KEY_CHARS} characters")
        if not is_loopback(self.host) and not self.allow_network:
            raise ServerConfigError(
                f"{self.host or '0.0.0.0'} can be reached from other machines: to serve there on purpose, "
                "add --allow-network (setting server.allow_network); 127.0.0.1 serves this computer only")
        for origin in self.cors_origins:
            if origin != "*" and "://" not in origin:
                raise ServerConfigError(f"CORS origin {origin!r} must look like https://host[:port]")

    def allowed_hosts(self) -> frozenset[str]:
        """Host header names this server answers to (lower case, IPv6 without brackets): loopback
        names, the bound address, and for a wildcard bind this machine's own addresses and name.
        Anything else is a DNS-rebinding attempt or a misdirected request."""
        names = set(LOOPBACK_NAMES) | {h.lower().strip("[]") for h in self.extra_hosts}
        if self.host not in WILDCARDS:
            names.add(self.host.lower().strip("[]"))
        else:
            names |= _own_addresses()
        return frozenset(names)


def _own_addresses() -> set[str]:
    names = set()
    try:
        for addrs in psutil.net_if_addrs().values():
            names |= {a.address.split("%")[0].lower() for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)}
    except Exception:  # noqa: BLE001 - the loopback names and the host name still work
        log.warning("could not list this machine's addresses", exc_info=True)
    hostname = socket.gethostname().lower()
    if hostname:
        names |= {hostname, f"{hostname}.local"}
    return names
