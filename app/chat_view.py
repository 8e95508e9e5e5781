"""The conversation as bubbles in a QTextBrowser, re-rendered at most every RENDER_MS while an
answer streams (tokens arrive in batches; the document is rebuilt only for the live message)."""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QTextBrowser

from app.citations import SOURCES, open_source
from app.render import CODE_BLOCKS, message_html

RENDER_MS = 50


class ChatView(QTextBrowser):
    sig_notice = Signal(str)  # a cited document could not be opened (a message for the user)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenExternalLinks(False)
        self.setOpenLinks(False)  # model output never navigates the view
        self.anchorClicked.connect(self._on_link)
        self.messages: list[dict] = []  # {"role", "content", "stats", "streaming"}
        self._dirty = False
        self._cache: dict[int, tuple[str, int, str]] = {}  # index -> (content, stats id, html)
        self._timer = QTimer(self)
        self._timer.setInterval(RENDER_MS)
        self._timer.timeout.connect(self._render_if_dirty)
        self._timer.start()

    # ---- content
    def set_messages(self, messages: list[dict]) -> None:
        self.messages = [dict(m, streaming=False) for m in messages if not m.get("superseded")]
        self._cache.clear()
        self._render()

    def add_user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text, "stats": {}, "streaming": False})
        self.messages.append({"role": "assistant", "content": "", "stats": {}, "streaming": True})
        self._render()

    def append_tokens(self, text: str) -> None:
        if self.messages and self.messages[-1]["streaming"]:
            self.messages[-1]["content"] += text
            self._dirty = True

    def finish(self, done: dict) -> None:
        if self.messages and self.messages[-1]["role"] == "assistant":
            last = self.messages[-1]
            last.update(content=done["text"], streaming=False,
                        stats=dict(done["stats"], level=done.get("level"), model=done.get("model")))
        self._render()

    def restart_answer(self) -> None:
        """The cascade re-asks on L2: the weak answer is replaced by the new one as it streams."""
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages[-1].update(content="", streaming=True, stats={})
            self._render()

    def fail(self, message: str) -> None:
        if self.messages and self.messages[-1]["role"] == "assistant" and self.messages[-1]["streaming"]:
            last = self.messages[-1]
            last["streaming"] = False
            if not last["content"]:
                self.messages.pop()
        self._render()

    def ends_with_answer(self) -> bool:
        return len(self.messages) >= 2 and self.messages[-1]["role"] == "assistant" and \
            self.messages[-2]["role"] == "user"

    def last_user(self) -> str | None:
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), None)

    def drop_last_turn(self) -> None:
        """The last user message and what followed it (an edit replaces them)."""
        last = max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=None)
        if last is not None:
            del self.messages[last:]
            self._cache = {i: c for i, c in self._cache.items() if i < last}
            self._render()

    def last_answer(self) -> str:
        for m in reversed(self.messages):
            if m["role"] == "assistant":
                return m["content"]
        return ""

    def _on_link(self, url) -> None:
        """Only the view's own "copy" and "cite" links do anything; links in model output are inert."""
        if url.scheme() == "copy" and url.path() in CODE_BLOCKS:
            from PySide6.QtGui import QGuiApplication

            QGuiApplication.clipboard().setText(CODE_BLOCKS[url.path()])
        elif url.scheme() == "cite" and url.path() in SOURCES:
            problem = open_source(SOURCES[url.path()])
            if problem:
                self.sig_notice.emit(problem)

    # ---- drawing
    def _render_if_dirty(self) -> None:
        if self._dirty:
            self._render()

    def _render(self) -> None:
        self._dirty = False
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 8
        parts = []
        for i, m in enumerate(self.messages):  # finished messages are rendered once
            cached = self._cache.get(i)
            if cached and not m.get("streaming") and cached[0] == m["content"] and cached[1] == id(m.get("stats")):
                parts.append(cached[2])
                continue
            piece = message_html(m["role"], m["content"], m.get("stats"), m.get("streaming"))
            if not m.get("streaming"):
                self._cache[i] = (m["content"], id(m.get("stats")), piece)
            parts.append(piece)
        self.setHtml("".join(parts))
        if at_bottom:
            self.moveCursor(QTextCursor.End)
            bar.setValue(bar.maximum())
