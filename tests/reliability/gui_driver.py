"""Drive the real desktop window from a script: the crash tests run it in a subprocess and kill it.

    python tests/reliability/gui_driver.py '<steps as JSON>'   (ASSISTANT_HOME set by the caller)

Builds the window with `app.main.create_main_window` (offscreen), shows it, and plays the steps
through the window's own actions, the way a user would:
    {"model": "demo-small", "n_ctx": 1024, "temperature": 0.8}   first step: how to start the engine
    {"open": ID}                        click a chat in the list (waits for its history)
    {"new": true}                       click "New chat" (waits until it exists)
    {"send": TEXT, "max_tokens": N}     type a message and send it (a new chat when none is open)
    {"close": true}                     close the window (the engine saves its state) and exit

One JSON line per event on stdout: ready, opened (a chat is open: `open`, `new`), tokens (text the chat view gained since the last
one, while the answer streams), done (conversation_id, message_id, text, stats), failed (message),
closed. After the last step it idles until killed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.engine_worker import EngineWorker
from app.main import create_main_window, finish

TICK_MS = 10


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields, ensure_ascii=False) + "\n")
    sys.stdout.flush()


class Driver:
    def __init__(self, app: QApplication, steps: list[dict]):
        start = steps[0]
        self.app = app
        self.steps = steps[1:]
        worker = EngineWorker(start.get("model", "demo-small"), n_ctx=start.get("n_ctx"))
        self.window = create_main_window(worker=worker, temperature=start.get("temperature", 0.8))
        self.window.show()
        self.ready = False
        self.step: dict | None = None
        self.shown = 0             # characters of the streaming answer already reported
        self.done_before = None    # window.last_done when the message was sent
        self.view_list = None      # the chat view's message list before `open` (its history replaces it)
        self.left: int | None = None  # the chat open before `new`

    def tick(self) -> None:
        w = self.window
        if w.engine_error:
            emit(event="failed", message=w.engine_error)
            self.step, self.steps = None, []
            return
        if not w.engine_ready:
            return
        if not self.ready:
            self.ready = True
            emit(event="ready")
        if self.step is None:
            if not self.steps:
                return
            self.step = self.steps.pop(0)
            self._begin(self.step)
        else:
            self._progress(self.step)

    def _begin(self, step: dict) -> None:
        w = self.window
        if "send" in step:
            w.max_tokens = step.get("max_tokens", 64)
            self.shown, self.done_before = 0, w.last_done
            w.send_message(step["send"])
        elif "open" in step:
            self.view_list = w.view.messages
        elif "new" in step:
            self.left = w.conversation_id
            w.new_chat()
        elif "close" in step:
            w.close()  # closeEvent: the engine saves its KV state and closes the database
            emit(event="closed")
            finish(0)

    def _progress(self, step: dict) -> None:
        w = self.window
        if "open" in step:
            if w.conversation_id != step["open"]:
                for item in w.sidebar.chat_items():  # the list fills once the engine is ready
                    if item.data(Qt.UserRole) == step["open"]:
                        w.chat_list.setCurrentItem(item)  # what a click does: `_select` loads it
                        break
            elif w.view.messages is not self.view_list:  # its history arrived and is shown
                emit(event="opened", conversation_id=w.conversation_id, messages=len(w.view.messages))
                self.step = None
            return
        if "new" in step:
            if not w.busy and w.conversation_id not in (None, self.left):
                emit(event="opened", conversation_id=w.conversation_id, messages=len(w.view.messages))
                self.step = None
            return
        messages = w.view.messages
        if messages and messages[-1].answer and messages[-1].streaming:
            text = messages[-1].content
            if len(text) > self.shown:
                emit(event="tokens", text=text[self.shown:])
                self.shown = len(text)
        if w.busy or w.conversation_id is None:
            return
        if w.last_done is not self.done_before:
            done = w.last_done
            emit(event="done", conversation_id=w.conversation_id, message_id=done.message_id,
                 text=done.text, stats=done.stats)
        else:
            emit(event="failed", message=w.banner.text())
        self.step = None


def main() -> None:
    steps = json.loads(sys.argv[1])
    app = QApplication.instance() or QApplication(sys.argv[:1])
    driver = Driver(app, steps)
    timer = QTimer()
    timer.setInterval(TICK_MS)
    timer.timeout.connect(driver.tick)
    timer.start()
    app.exec()


if __name__ == "__main__":
    main()
