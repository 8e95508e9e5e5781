"""The conversation as bubbles in a QTextBrowser, re-rendered at most every RENDER_MS while an
answer streams (tokens arrive in batches; the document is rebuilt only for the live message).
A user message's images are thumbnails (app/images.py makes them off the GUI thread; a grey box
stands in until one arrives), each a link that opens the image whole."""

from __future__ import annotations

import html
import time

from PySide6.QtCore import QPoint, QTimer, Signal
from PySide6.QtGui import QColor, QCursor, QImage, QTextCursor, QTextDocument
from PySide6.QtWidgets import QTextBrowser, QToolTip

from app import chat_surface

from app.citations import SOURCES, open_source
from app.i18n import tr
from app.message_actions import MessageToolbar, actions_for
from app.chat_rounds import fold_tool_rounds
from app.render import (COLOURS, CODE_BLOCKS, images_html, markdown_html, message_html, routing_text, steps_html,
                        thinking_html)

RENDER_MS = 50
SHOWN = 120      # a chat opens on its last SHOWN messages; earlier ones a click away (a 1 000-message
MORE = 200       # chat took ~0.5 s to draw whole: bench/window_long_chat.py); MORE more per click
THUMB_H = 120    # a sent image's thumbnail height in the chat (logical pixels)


class ChatView(QTextBrowser):
    sig_notice = Signal(str)  # a cited document could not be opened (a message for the user)
    sig_empty = Signal(bool)  # the view became empty (True) or got its first message (False)
    sig_action = Signal(str, int)  # "regenerate" | "edit" | "branch" | "delete", the message's index
    sig_branch = Signal(int)  # the id of the sibling message to show (‹ › under a message)
    sig_image = Signal(str, str)  # a thumbnail clicked: the image's digest (and a name), to show whole
    sig_column = Signal(int)  # the reading column's width changed (the composer matches it)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenExternalLinks(False)
        self.setOpenLinks(False)  # model output never navigates the view
        self.column = 0
        self.anchorClicked.connect(self._on_link)
        # {"role", "content", "stats", "streaming", "reasoning", "think_open", "think_t0", "steps", "rev"};
        # "steps": an answer's earlier tool rounds, [("text", str) | ("tool", block)], shown above its text
        self.messages: list[dict] = []
        self._dirty = False
        self._was_empty = True
        self.first_shown = 0  # messages before this index are not drawn until asked for
        # The finished messages' HTML pieces as the document holds them, and where the answer being
        # written starts in it: a render draws only what follows the pieces that did not change.
        self._drawn: list[str] | None = None
        self._tail: int | None = None
        self._cache: dict[int, tuple[tuple, str]] = {}  # index -> (what it was drawn from, html)
        self.idle = True  # the engine takes a new turn: actions that start one are offered
        self._hidden: list[dict] | None = None  # the turns after a branch's answer, until its message is sent
        self.thumbnails = None  # app/images.py Thumbnails: the window gives it
        self._thumbs_due = False
        self.toolbar = MessageToolbar(self.viewport())
        self.toolbar.triggered.connect(self.act)
        self.viewport().setMouseTracking(True)
        self._timer = QTimer(self)
        self._timer.setInterval(RENDER_MS)
        self._timer.timeout.connect(self._render_if_dirty)
        self._timer.start()

    # ---- content
    def set_messages(self, messages: list[dict]) -> None:
        self.messages = fold_tool_rounds([dict(m, streaming=False) for m in messages if not m.get("superseded")])
        self._hidden = None
        self.first_shown = max(0, len(self.messages) - SHOWN)
        self._cache.clear()
        self._drawn = None
        self._render()

    def redraw(self) -> None:
        """Draw every message again (the bubble colours changed with the look)."""
        self._cache.clear()
        self._drawn = None
        self._render()

    def show_earlier(self) -> None:
        """MORE earlier messages above the ones shown (the "Show earlier messages" link)."""
        self.first_shown = max(0, self.first_shown - MORE)
        self._render()

    def add_user(self, text: str, images: list[str] = ()) -> None:
        images = [{"digest": d, "at": 0} for d in images] or None
        self.messages.append({"role": "user", "content": text, "stats": {}, "streaming": False, "images": images})
        self.messages.append({"role": "assistant", "content": "", "stats": {}, "streaming": True})
        self._render()

    def append_tokens(self, text: str) -> None:
        if self.messages and self.messages[-1]["streaming"]:
            last = self.messages[-1]
            last["content"] += text
            if last.get("think_t0") and last.get("think_s") is None:  # the answer began: thinking is over
                last["think_s"] = time.monotonic() - last["think_t0"]
            self._dirty = True

    def append_thinking(self, text: str) -> None:
        """A reasoning model's thinking as it streams: into the answer's folded block."""
        if self.messages and self.messages[-1]["streaming"]:
            last = self.messages[-1]
            last["reasoning"] = last.get("reasoning", "") + text
            last.setdefault("think_t0", time.monotonic())
            self._dirty = True

    def finish(self, done: dict) -> None:
        if self.messages and self.messages[-1]["role"] == "assistant":
            last = self.messages[-1]
            last.update(content=done["text"], streaming=False, reasoning=done.get("reasoning") or "",
                        stats=dict(done["stats"], level=done.get("level"), model=done.get("model")))
        self._render()

    # ---- tool rounds (the answer's calls, shown as collapsed blocks)
    def round_done(self, done: dict) -> None:
        """A round that ended in calls: its text moves above, the next round streams below it."""
        if self.messages and self.messages[-1]["role"] == "assistant" and self.messages[-1]["streaming"]:
            last = self.messages[-1]
            text = done.get("text") or last["content"]
            if text.strip():
                last.setdefault("steps", []).append(("text", text))
            last["content"] = ""
            last["rev"] = last.get("rev", 0) + 1
            self._dirty = True

    def tool_event(self, event: dict) -> None:
        """A call (a new block) or its result (the block it answers is updated)."""
        if not (self.messages and self.messages[-1]["role"] == "assistant"):
            return
        last = self.messages[-1]
        steps = last.setdefault("steps", [])
        if event["kind"] == "call":
            steps.append(("tool", {k: event[k] for k in ("call_id", "server", "tool", "arguments")}))
        else:
            block = next((b for kind, b in reversed(steps) if kind == "tool" and b["call_id"] == event["call_id"]), None)
            if block is None:
                block = {"call_id": event["call_id"], "server": event["server"], "tool": event["tool"]}
                steps.append(("tool", block))
            block.update(status=event["status"], text=event["text"], seconds=event.get("seconds"))
        last["rev"] = last.get("rev", 0) + 1
        self._dirty = True

    # ---- one message's actions (app/message_actions.py)
    def act(self, action: str, index: int) -> None:
        """Copying is the view's own; the rest goes to the window (`sig_action`)."""
        if index is None or not 0 <= index < len(self.messages):
            return
        if action in ("copy", "markdown"):
            self.copy_message(index, markdown=action == "markdown")
        elif any(a == action for a, _, _ in actions_for(self.messages[index], self.idle)):
            self.toolbar.clear()
            self.sig_action.emit(action, index)

    def message_at(self, pos: QPoint) -> int | None:
        """The index of the message drawn at `pos` (viewport coordinates), if any."""
        frame = self._frame_at(pos)
        return None if frame is None else frame[0]

    def _frame_at(self, pos: QPoint):
        """(message index, its table) drawn at `pos` (viewport coordinates): each message is a table
        at the document's top level (code blocks and Markdown tables are nested inside)."""
        position = self.cursorForPosition(pos).position()
        for k, frame in enumerate(self.document().rootFrame().childFrames()):
            if frame.firstPosition() - 1 <= position <= frame.lastPosition() + 1:
                index = self.first_shown + k
                return (index, frame) if index < len(self.messages) else None
        return None

    def mouseMoveEvent(self, event):  # noqa: N802 - Qt's name
        super().mouseMoveEvent(event)
        pos = event.position().toPoint()
        found = self._frame_at(pos)
        if found is None or not actions_for(self.messages[found[0]], self.idle):
            if not self.toolbar.geometry().contains(pos):
                self.toolbar.clear()
            return
        index, frame = found
        rect = self.document().documentLayout().frameBoundingRect(frame)
        below = rect.bottom() - self.verticalScrollBar().value() + 2  # in the gap under the message
        dx = self.horizontalScrollBar().value()
        user = self.messages[index]["role"] == "user"
        x = rect.right() - dx if user else rect.left() - dx
        self.toolbar.show_for(index, actions_for(self.messages[index], self.idle), QPoint(int(x), int(below)),
                              right=user)

    def paintEvent(self, event):  # noqa: N802 - Qt's name
        chat_surface.paint_shapes(self, COLOURS)  # rounded bubbles and code blocks, under the text
        super().paintEvent(event)

    def resizeEvent(self, event):  # noqa: N802 - Qt's name
        self._set_column()  # first: QTextEdit lays the document out to the viewport's new width
        super().resizeEvent(event)

    def column_sides(self) -> tuple[int, int, int]:
        """(left, top, right) space beside the column, seen from this view's edges: what a widget
        under the view leaves to line up with it."""
        port = self.viewport().geometry()
        inner = round(self.document().documentMargin())
        return port.left() + inner, 0, self.width() - port.right() - 1 + inner

    def _set_column(self) -> None:
        column = chat_surface.set_column(self)
        if column != self.column:
            self.column = column
            self.sig_column.emit(column)

    def leaveEvent(self, event):  # noqa: N802 - Qt's name
        super().leaveEvent(event)
        if not self.toolbar.underMouse():
            self.toolbar.clear()

    def contextMenuEvent(self, event):  # noqa: N802 - Qt's name
        """The standard menu (copy the selection, select all) with the message's own actions."""
        menu = self.createStandardContextMenu(event.pos())
        index = self.message_at(self.viewport().mapFromGlobal(event.globalPos()))
        actions = actions_for(self.messages[index], self.idle) if index is not None else []
        if actions:
            menu.addSeparator()
            for action, label, _ in actions:
                menu.addAction(label, lambda a=action, i=index: self.act(a, i))
        menu.exec(event.globalPos())

    def set_idle(self, idle: bool) -> None:
        self.idle = idle
        self.toolbar.clear()

    def adopt_ids(self, rows: list[dict]) -> bool:
        """Give the messages shown their stored ids and branches (the chat's transcript, read
        after a turn); False when what is shown is not that chat's path (the caller redraws)."""
        if self._hidden is not None:
            return True  # a branch waits for its first message: the view shows part of the path
        path = fold_tool_rounds([dict(r) for r in rows if not r.get("superseded")])
        if [m["role"] for m in path] != [m["role"] for m in self.messages]:
            return False
        redraw = False
        for shown, stored in zip(self.messages, path):
            if shown.get("streaming"):
                return True  # a turn started since: its ids come with the next read
            redraw |= shown.get("branches") != stored.get("branches")  # only ‹ › is drawn of these
            shown.update(id=stored.get("id"), branches=stored.get("branches"))
        if redraw:  # a whole redraw is ~90 ms for a long chat: not after every answer
            self._render()
        return True

    def branch_step(self, index: int, step: int) -> None:
        """‹ or › under message `index`: ask for its sibling `step` away."""
        siblings = self.messages[index].get("branches") or []
        at = siblings.index(self.messages[index]["id"]) if self.messages[index].get("id") in siblings else None
        if at is not None and 0 <= at + step < len(siblings) and self.idle:
            self.sig_branch.emit(siblings[at + step])

    def copy_message(self, index: int, markdown: bool = False) -> str:
        """Copy one message: an answer's Markdown as written, or any message as the plain text it
        reads as (Markdown rendered, then its text)."""
        from PySide6.QtGui import QGuiApplication, QTextDocument

        m = self.messages[index]
        text = m["content"]
        if not markdown and m["role"] == "assistant":
            doc = QTextDocument()
            doc.setHtml(markdown_html(text))
            text = doc.toPlainText().strip()
        QGuiApplication.clipboard().setText(text)
        return text

    def tool_blocks(self) -> list[dict]:
        """Every tool block in the chat, in order (tests and the window read them)."""
        return [b for m in self.messages for kind, b in m.get("steps", ()) if kind == "tool"]

    def restart_answer(self) -> None:
        """The cascade re-asks on L2: the weak answer is replaced by the new one as it streams."""
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages[-1].update(content="", streaming=True, stats={}, reasoning="", think_t0=None,
                                     think_s=None)
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

    def drop_last_turn(self) -> None:
        """The last user message and what followed it (a message that was not sent)."""
        last = self.last_user_index()
        if last is not None:
            self.cut(last)

    def cut(self, index: int) -> None:
        """Drop the messages from `index` on (an answer given again, a message edited)."""
        del self.messages[index:]
        self._cache = {i: c for i, c in self._cache.items() if i < index}
        self._hidden = None
        self._render()

    def preview_cut(self, index: int) -> None:
        """Show the chat up to `index` while a branch waits for its first message; `end_preview`
        brings the rest back (or lets it go, once the message is sent)."""
        hidden = self.messages[index:]
        self.cut(index)
        self._hidden = hidden

    def end_preview(self, keep: bool = True) -> None:
        hidden, self._hidden = self._hidden, None
        if hidden and keep:
            self.messages.extend(hidden)
            self._render()

    def index_of(self, message_id: int) -> int | None:
        return next((i for i, m in enumerate(self.messages) if m.get("id") == message_id), None)

    def last_user_index(self) -> int | None:
        return max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=None)

    def last_answer(self) -> str:
        """The last answer's text (a reasoning model's thinking is not part of it)."""
        for m in reversed(self.messages):
            if m["role"] == "assistant":
                return m["content"]
        return ""

    def _on_link(self, url) -> None:
        """Only the view's own "copy", "cite" and "think" links do anything; links in model output are inert."""
        if url.scheme() == "more":
            self.show_earlier()
        elif url.scheme() == "info" and url.path().isdigit() and int(url.path()) < len(self.messages):
            # Why this tier answered: kept for those who want it, out of the status line.
            QToolTip.showText(QCursor.pos(), routing_text(self.messages[int(url.path())].get("stats") or {}), self)
        elif url.scheme() == "image" and url.path():
            self.sig_image.emit(url.path(), "")
        elif url.scheme() == "branch":
            i, _, step = url.path().partition(":")
            if i.isdigit() and int(i) < len(self.messages) and step in ("-1", "1"):
                self.branch_step(int(i), int(step))
        elif url.scheme() == "tool":
            i, _, n = url.path().partition(".")
            if i.isdigit() and n.isdigit() and int(i) < len(self.messages):
                steps = self.messages[int(i)].get("steps", [])
                if int(n) < len(steps) and steps[int(n)][0] == "tool":
                    block = steps[int(n)][1]
                    block["open"] = not block.get("open")
                    m = self.messages[int(i)]
                    m["rev"] = m.get("rev", 0) + 1
                    self._render()
        elif url.scheme() == "think" and url.path().isdigit() and int(url.path()) < len(self.messages):
            m = self.messages[int(url.path())]
            m["think_open"] = not m.get("think_open", not m["content"] and not m.get("streaming"))
            self._render()
        elif url.scheme() == "copy" and url.path() in CODE_BLOCKS:
            from PySide6.QtGui import QGuiApplication

            QGuiApplication.clipboard().setText(CODE_BLOCKS[url.path()])
        elif url.scheme() == "cite" and url.path() in SOURCES:
            problem = open_source(SOURCES[url.path()])
            if problem:
                self.sig_notice.emit(problem)

    # ---- drawing
    def _render_if_dirty(self) -> None:
        last = self.messages[-1] if self.messages else None
        if last is not None and last.get("streaming") and last.get("think_t0") and last.get("think_s") is None:
            second = int(time.monotonic() - last["think_t0"])
            if second != last.get("think_shown"):  # the "Thinking… N s" line counts up, once a second
                last["think_shown"] = second
                self._dirty = True
        if self._dirty:
            self._render()

    @staticmethod
    def _branch(m: dict) -> tuple[int, int] | None:
        """(which, of how many) for a message with siblings: ‹ 2 / 3 ›."""
        siblings = m.get("branches") or []
        return (siblings.index(m["id"]) + 1, len(siblings)) if m.get("id") in siblings else None

    @staticmethod
    def _thinking(i: int, m: dict) -> str:
        if m["role"] != "assistant" or not (m.get("reasoning") or (m.get("stats") or {}).get("reasoning_tokens")):
            return ""
        streaming = bool(m.get("streaming"))
        if streaming:
            seconds = m.get("think_s")
            if seconds is None and m.get("think_t0"):
                seconds = time.monotonic() - m["think_t0"]
            streaming = m.get("think_s") is None  # "Thinking…" until the answer begins
        else:
            ms = (m.get("stats") or {}).get("reasoning_ms")
            seconds = ms / 1000 if ms else None
        # An answer that is all thinking (a block never closed) shows it open: there is nothing else.
        opened = m.get("think_open", not m["content"] and not m.get("streaming"))
        return thinking_html(m.get("reasoning") or "", i, bool(opened), seconds, streaming)

    # ---- images
    def _pictures(self, m: dict) -> list[tuple[str, int, int]]:
        """(digest, width, height) of a message's thumbnails as drawn: the thumbnail's shape once it
        is made, a 4:3 box until then (drawn again when it arrives)."""
        out = []
        for image in m.get("images") or ():
            thumb = self.thumbnails.get(image["digest"]) if self.thumbnails is not None else None
            w, h = (thumb.width(), thumb.height()) if thumb is not None and thumb.height() else (4, 3)
            height = min(THUMB_H, h) if thumb is not None else THUMB_H
            out.append((image["digest"], max(1, round(w * height / h)), height))
        return out

    def loadResource(self, kind: int, url):  # noqa: N802 - Qt's name: a thumbnail or an icon, else nothing
        if url.scheme() == "icon":
            from app.icons import pixmap
            from app.theme import colour

            return pixmap(url.path(), colour("muted"), 14, self.devicePixelRatioF()).toImage()
        if url.scheme() == "thumb":
            thumb = self.thumbnails.get(url.path()) if self.thumbnails is not None else None
            if thumb is not None:
                return thumb
            box = QImage(4, 3, QImage.Format_RGB32)
            box.fill(QColor("#b0b0b0"))
            return box
        return None  # model output never loads a file or a network address

    def thumbnail_ready(self, digest: str) -> None:
        """A thumbnail arrived: the messages showing it are drawn again (once for a batch)."""
        thumb = self.thumbnails.get(digest) if self.thumbnails is not None else None
        if thumb is not None:
            self.document().addResource(QTextDocument.ImageResource, f"thumb:{digest}", thumb)
        shown = any(i["digest"] == digest for m in self.messages for i in m.get("images") or ())
        if shown and not self._thumbs_due:
            self._thumbs_due = True
            QTimer.singleShot(30, self._redraw_thumbs)

    def _redraw_thumbs(self) -> None:
        self._thumbs_due = False
        self.redraw()

    def _render(self) -> None:
        self._dirty = False
        empty = not self.messages
        if empty != self._was_empty:
            self._was_empty = empty
            self.sig_empty.emit(empty)
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 8
        parts = []
        if self.first_shown:
            more = tr("Show {n} earlier messages").format(n=self.first_shown)
            parts.append(f"<p align='center'><a href='more:'>{html.escape(more)}</a></p>")
        for i, m in enumerate(self.messages):  # finished messages are rendered once
            if i < self.first_shown:
                continue
            cached = self._cache.get(i)
            pictures = self._pictures(m)
            key = (m["content"], id(m.get("stats")), m.get("think_open"), m.get("reasoning") or "", m.get("rev"),
                   tuple(m.get("branches") or ()), tuple(pictures))
            if cached and not m.get("streaming") and cached[0] == key:
                parts.append(cached[1])
                continue
            piece = message_html(m["role"], m["content"], m.get("stats"), m.get("streaming"),
                                 thinking=self._thinking(i, m) + steps_html(i, m.get("steps", ())), index=i,
                                 branch=self._branch(m), images=images_html(pictures))
            if not m.get("streaming"):
                self._cache[i] = (key, piece)
            parts.append(piece)
        live = bool(self.messages) and bool(self.messages[-1].get("streaming"))
        done = parts[:-1] if live else parts
        drawn = self._drawn
        cursor = QTextCursor(self.document())
        if drawn is not None and done[:len(drawn)] == drawn:
            # The document still starts with what is drawn: only what follows is drawn (the answer
            # being written, or the finished answer and a new message). Setting the whole document
            # every RENDER_MS cost a long chat ~180 ms per frame (bench/window_long_chat.py), and
            # once more on each send (16 ms in a four-message chat, more the longer it is).
            # Appending pieces gives the same document as setting them at once.
            if self._tail is None:
                cursor.movePosition(QTextCursor.End)
            else:
                cursor.setPosition(self._tail)
                cursor.movePosition(QTextCursor.End, QTextCursor.KeepAnchor)
            added = "".join(done[len(drawn):])
            if added:
                cursor.insertHtml(added)
            else:
                cursor.removeSelectedText()
        else:
            self.setHtml("".join(done))
            cursor = QTextCursor(self.document())
        self._drawn, self._tail = done, None
        if live:
            cursor.movePosition(QTextCursor.End)
            self._tail = cursor.position()
            cursor.insertHtml(parts[-1])
        if at_bottom:
            self.moveCursor(QTextCursor.End)
            bar.setValue(bar.maximum())

