"""`ApiServer`: the local OpenAI-compatible server around one Assistant.

Threads: uvicorn's event loop (HTTP, guards, translation; `run` keeps it on the calling thread,
`start` on a thread of its own) and "api-engine" (engine/server/engine_thread.py), the one thread
that calls the Assistant, or, for a front-end serving beside its own chats
(`serve_in_background(..., post=...)`), that front-end's engine thread. Shutdown (SIGINT/SIGTERM
under `run`, or `stop`): stop accepting, end the queued jobs (503), cancel the running turn, let
the open responses finish, then the engine thread deletes unstored API conversations and exits.
The caller closes the Assistant after.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING

import uvicorn

from engine.api import Settings, load_catalog
from engine.server.app import create_app
from engine.server.config import ServerConfig, load_api_key
from engine.server.engine_thread import EngineThread, Job, Post
from engine.server.fair_queue import FairQueue
from engine.server.history import ApiConversations
from engine.server.protocol import HeaderDeadlineProtocol
from engine.server.schema import key_tag

if TYPE_CHECKING:
    from engine.api import Assistant

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 5  # open responses get this long to end once their turns are cancelled
START_S = 30.0


class _Uvicorn(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_shutdown):
        super().__init__(config)
        self._on_shutdown = on_shutdown
        self.on_ready = None  # called once listening (the CLI prints the URL)

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started and self.on_ready is not None:
            self.on_ready()

    async def shutdown(self, sockets=None) -> None:
        self._on_shutdown()  # first: the answers being written end within a piece or a token
        await super().shutdown(sockets)


def _ignore(signum, frame) -> None:
    log.info("signal %d: already shutting down", signum)


def installed_models() -> set[str]:
    """Catalog ids whose files are on this machine."""
    try:
        return {e.id for e in load_catalog().entries if e.present()}
    except OSError:
        log.warning("the model catalog could not be read", exc_info=True)
        return set()


class ApiServer:
    """Serve `assistant` over HTTP.

        server = ApiServer(assistant, ServerConfig(api_key=key)).start()   # on a thread
        ... server.url ...
        server.stop(); assistant.close()

    Args:
        assistant: the engine (not closed here: its owner closes it after `stop`/`run`).
        config: where and how to serve; `check()`ed here.
        settings: read for generate.repetition_guard (default: the assistant's own).
        post: run the jobs on a front-end's engine thread (engine/server/engine_thread.py `Post`);
            None: on a thread of the server's own.
        own_logging: uvicorn sets up its loggers' handlers (the command line); False: its records
            go to the front-end's logging (and a windowed app without stdout cannot break it).

    Raises:
        ServerConfigError: the config breaks a default that keeps the server safe.
    """

    def __init__(self, assistant: "Assistant", config: ServerConfig, settings: Settings | None = None,
                 post: Post | None = None, own_logging: bool = True):
        config.check()
        self.assistant, self.config = assistant, config
        settings = settings or getattr(assistant, "settings", None)
        self.repetition_guard = settings.get("generate.repetition_guard") if settings is not None else True
        self.key_tag = key_tag(config.api_key)  # the clients' trust domains (engine/server/schema.py)
        self.installed = installed_models()
        self.queue: FairQueue[Job] = FairQueue(config.queue_depth)
        self.conversations = ApiConversations(config.store_conversations)
        self.engine = EngineThread(assistant, self.queue, self.conversations, post)
        protocol = type("Protocol", (HeaderDeadlineProtocol,), {"header_timeout_s": config.header_timeout_s})
        uv = uvicorn.Config(create_app(self), host=config.host, port=config.port, http=protocol, ws="none",
                            lifespan="off", log_level="warning", access_log=False, server_header=False,
                            log_config=uvicorn.config.LOGGING_CONFIG if own_logging else None,
                            proxy_headers=False, limit_concurrency=config.max_connections,
                            timeout_keep_alive=5, timeout_graceful_shutdown=GRACE_S)
        self._uvicorn = _Uvicorn(uv, self.engine.shutdown)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on (the one the OS gave for port 0), once started."""
        servers = getattr(self._uvicorn, "servers", None) or []
        for server in servers:
            for sock in server.sockets:
                return sock.getsockname()[1]
        return self.config.port

    @property
    def url(self) -> str:
        host = self.config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    def unlisted(self) -> frozenset[int]:
        """Conversations of this server's that are not to be kept (server.store_conversations
        off): a chat list leaves them out. Call it on the engine thread, which changes them."""
        return frozenset(self.conversations.unstored)

    def run(self, on_ready=None) -> None:
        """Serve on this thread until SIGINT/SIGTERM (main thread) or `stop`; then wind down.
        `on_ready()` is called once listening.

        Raises:
            OSError: the address is in use or cannot be bound.
        """
        self._uvicorn.on_ready = on_ready
        self.engine.start()
        # uvicorn raises the signal it handled once more after its shutdown, under the handlers it
        # found: let that land here instead of killing the process before the Assistant is closed.
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, _ignore) for sig in STOP_SIGNALS} if main else {}
        try:
            self._uvicorn.run()
        except SystemExit:  # uvicorn exits this way when it cannot bind
            raise OSError(f"could not listen on {self.config.host}:{self.config.port}") from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._finish()

    def start(self) -> "ApiServer":
        """Serve on a thread of its own; returns once listening.

        Raises:
            OSError: the address is in use or cannot be bound.
        """
        self.engine.start()
        self._thread = threading.Thread(target=self._serve, name="api-http", daemon=True)
        self._thread.start()
        while not self._uvicorn.started:
            if not self._thread.is_alive():
                self._finish()
                raise OSError(f"the API server could not listen on {self.config.host}:{self.config.port}")
            self._thread.join(0.02)
        return self

    def _serve(self) -> None:
        try:
            self._uvicorn.run()
        except SystemExit:  # uvicorn exits this way when it cannot bind
            log.error("the API server could not start on %s:%s", self.config.host, self.config.port)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving (any thread but the server's own): what `run` does on SIGTERM."""
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._finish()

    def _finish(self) -> None:
        self.engine.shutdown()
        if not self.engine.join():
            log.error("the API engine thread did not stop in time")


def serve_in_background(assistant: "Assistant", settings: Settings, post: Post | None = None,
                        **overrides) -> ApiServer:
    """Start serving `assistant` as the server.* settings say, on threads of the server's own;
    returns the started server once it listens (`url`, `port`, `stop()`).

        server = serve_in_background(assistant, settings, post=worker.post)
        ...
        server.stop()   # running API turns cancelled, the port closed; the assistant stays open

    Args:
        assistant: the engine a front-end already runs (not closed here).
        settings: server.* (bind, CORS, limits, store_conversations) and generate.repetition_guard.
        post: run the server's jobs on the front-end's engine thread (engine/server/engine_thread.py),
            so its own turns and API requests take turns on one thread.
        overrides: ServerConfig fields instead of the settings' (api_key: default the stored key,
            made on first use).

    Raises:
        ServerConfigError: the settings break a default that keeps the server safe.
        OSError: the address is in use or cannot be bound.
    """
    if overrides.get("api_key") is None:
        overrides["api_key"] = load_api_key(create=True)  # only then: a one-off key leaves the key file alone
    config = ServerConfig.from_settings(settings, **overrides)
    return ApiServer(assistant, config, settings, post=post, own_logging=False).start()
