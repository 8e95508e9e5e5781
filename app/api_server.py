"""The local API server in the app (issue 16): serves the window's own Assistant while the setting
server.enabled is on, with its jobs on the window's engine thread (`EngineWorker.post`: the engine
Runner's `run`).

Starting and stopping run on an "api-control" Runner (app/background.py), never on the GUI thread:
a stop waits for a running API turn to notice its cancel and for the engine thread to finish what
it is doing (a window turn), and the first start imports the web stack. The control thread touches
none of the worker's state: it asks the engine thread for the Assistant and posts the chat list's
filter there. The state comes back to the GUI thread through the Runner (`on_state`).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Callable, TypeVar

from PySide6.QtCore import QObject

from app.background import Runner
from app.engine_worker import EngineWorker
from app.i18n import tr
from engine.api import Settings
from engine.server import ServerConfigError, client_url, serve_in_background  # a front-end the window runs

log = logging.getLogger(__name__)

CLOSE_S = 40.0  # the longest the window's close waits for the server to stop
POLL_S = 0.2  # how often a wait for the engine thread (a window turn finishing first) looks at close
T = TypeVar("T")


class ApiServerControl(QObject):
    """Start, stop and restart the window's API server as the settings say.

    Args:
        worker: the window's engine (its Assistant, its thread's `post`).
        on_state: gets each new state {"running": bool, "url": str | None, "error": str | None}
            on the GUI thread.
    """

    def __init__(self, worker: EngineWorker, on_state: Callable[[dict], None] = lambda state: None, parent=None):
        super().__init__(parent)
        self.worker = worker
        self.on_state = on_state
        self.state: dict = {"running": False, "url": None, "error": None}  # GUI thread's copy
        self._server = None  # engine.server ApiServer; touched on the control thread only
        self._control = Runner("api-control", self)
        self.pending: Future | None = None  # the latest start/stop request (tests wait on it)
        self._closed = False

    def apply(self, restart: bool = False) -> Future | None:
        """Serve when server.enabled is on, stop when off (GUI thread, once the engine is ready);
        `restart`: a server setting or the key changed, so a running server starts again with them.
        None once the window has closed (an engine that became ready after that)."""
        if self._closed:
            return None
        self.pending = self._control.run(lambda: self._sync(restart))
        return self.pending

    def describe(self) -> str:
        """The state in words for the Settings section."""
        if self.state["error"]:
            return tr("Could not start: {why}").format(why=self.state["error"])
        if self.state["running"]:
            return tr("Running at {url}").format(url=self.state["url"])
        return tr("Off")

    def close(self) -> None:
        """Stop serving and wait for it (the window's close: its own turn was cancelled first)."""
        if self._closed:
            return
        self._closed = True
        future = self._control.run(self._stop)
        try:
            future.result(CLOSE_S)
        except TimeoutError:
            log.error("the local API server did not stop within %.0f s", CLOSE_S)
            return
        self._control.close()

    # ---- the control thread
    def _sync(self, restart: bool) -> None:
        try:
            wanted = bool(Settings.shared().get("server.enabled"))
            if self._server is not None and (restart or not wanted):
                self._stop()
            if wanted and self._server is None:
                self._start()
        except Exception:  # noqa: BLE001 - the window goes on without the server; the log has why
            log.exception("the local API server could not be started or stopped")
            self._report(error=tr("internal error (see the log)"))

    def _on_engine(self, fn: Callable[[EngineWorker], T]) -> T:
        """fn(worker) on the engine thread, which owns the worker and its Assistant, waited for
        (behind a window turn, if one runs) until the window closes.

        Raises:
            RuntimeError: the engine or the window has closed.
        """
        runner = self.worker.runner
        if runner is None:
            raise RuntimeError("the app's engine has not started")
        done = runner.run(lambda: fn(self.worker))
        while True:
            try:
                return done.result(POLL_S)
            except TimeoutError:
                if self._closed:  # the engine may drop what is queued as it shuts down
                    raise RuntimeError("the window is closing") from None

    def _set_hidden(self, hidden) -> None:
        """The chat list's filter, set on the engine thread (after what is queued there); a closed
        engine lists nothing any more."""
        try:
            self.worker.post(lambda: setattr(self.worker, "hidden", hidden))
        except RuntimeError:
            pass

    def _start(self) -> None:
        try:
            assistant = self._on_engine(lambda worker: worker.assistant)
        except RuntimeError:
            return  # the window is closing: nothing to serve
        if assistant is None:
            return  # no engine: nothing to serve (the window says why)
        settings = Settings.shared()
        try:
            server = serve_in_background(assistant, settings, post=self.worker.post)
        except ServerConfigError as exc:  # a hand-edited settings file: the engine's words
            self._report(error=str(exc))
            return
        except OSError as exc:
            log.warning("local API server: %s", exc)
            self._report(error=tr("nothing can listen on port {port} (another program may use it): choose "
                                  "another port").format(port=settings.get("server.port")))
            return
        self._server = server
        self._set_hidden(server.unlisted)  # unstored API chats stay out of the chat list
        log.info("local API server at %s", server.url)
        self._report(url=client_url(server.config.host, server.port))

    def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()
            self._set_hidden(tuple)
            log.info("local API server stopped")
        self._report()

    def _report(self, url: str | None = None, error: str | None = None) -> None:
        self._control.to_gui(self._on_state, {"running": url is not None, "url": url, "error": error})

    # ---- the GUI thread
    def _on_state(self, state: dict) -> None:
        self.state = state
        self.on_state(state)
