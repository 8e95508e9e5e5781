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
from app.transcript import Shown, Transcript
from app.render import (COLOURS, CODE_BLOCKS, images_html, markdown_html, message_html, routing_text, steps_html,
                        thinking_body, thinking_html, thought_chip)

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
        self.transcript = Transcript()  # the controller's (app/chat_controller.py): the window gives it
        self._dirty = False
        self._was_empty = True
        self.first_shown = 0  # messages before this index are not drawn until asked for
        # The finished messages' HTML pieces as the document holds them, and where the answer being
        # written starts in it: a render draws only what follows the pieces that did not change.
        self._drawn: list[str] | None = None
        self._tail: int | None = None
        self._cache: dict[int, tuple[tuple, str]] = {}  # index -> (what it was drawn from, html)
        self.idle = True  # the engine takes a new turn: actions that start one are offered
        self.thumbnails = None  # app/images.py Thumbnails: the window gives it
        self._thumbs_due = False
        self.toolbar = MessageToolbar(self.viewport())
        self.toolbar.triggered.connect(self.act)
        self.viewport().setMouseTracking(True)
        self._timer = QTimer(self)
        self._timer.setInterval(RENDER_MS)
        self._timer.timeout.connect(self._render_if_dirty)
        self._timer.start()

    # ---- content: the transcript changed
    @property
    def messages(self) -> list[Shown]:
        return self.transcript.messages

    def set_messages(self, messages: list[Shown]) -> None:
        """Show these messages (the transcript's whole content) and draw them anew."""
        self.transcript.set(messages)
        self.reset()

    def reset(self) -> None:
        """The transcript was replaced: draw its last SHOWN messages anew."""
        self.first_shown = max(0, len(self.messages) - SHOWN)
        self.redraw()

    def draw(self, now: bool = True) -> None:
        """The transcript changed: draw it now, or with the next frame (streamed text comes in
        batches; a frame every RENDER_MS at most)."""
        if now:
            self._render()
        else:
            self._dirty = True

    def redraw(self) -> None:
        """Draw every message again (the bubble colours changed with the look)."""
        self._cache.clear()
        self._drawn = None
        self._render()

    def show_earlier(self) -> None:
        """MORE earlier messages above the ones shown (the "Show earlier messages" link)."""
        self.first_shown = max(0, self.first_shown - MORE)
        self._render()

    # ---- one message's actions (app/message_actions.py)
    def act(self, action: str, index: int) -> None:
        """Copying is the view's own; the rest goes to the window (`sig_action`)."""
        if index is None or not 0 <= index < len(self.messages):
            return
        if action in ("copy", "markdown"):
            self.copy_message(index, markdown=action == "markdown")
        elif action in ("older", "newer"):
            self.branch_step(index, -1 if action == "older" else 1)
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
        if found is None or not self._offer(*found):
            if not self.toolbar.geometry().contains(pos):
                self.toolbar.clear()

    def _offer(self, index: int, frame) -> bool:
        """Show message `index`'s actions in the gap under it (`frame`: its table); False when it
        has none (an answer being written)."""
        m = self.messages[index]
        actions = actions_for(m, self.idle)
        if not actions:
            return False
        rect = self.document().documentLayout().frameBoundingRect(frame)
        below = rect.bottom() - self.verticalScrollBar().value() + 2  # in the gap under the message
        dx = self.horizontalScrollBar().value()
        user = m.role == "user"
        x = rect.right() - dx if user else rect.left() - dx
        self.toolbar.show_for(index, actions, QPoint(int(x), int(below)), right=user, branch=m.branch)
        return True

    def step_message(self, step: int) -> None:
        """Alt+Up / Alt+Down: the message before or after the one whose actions show (from the
        end, when none does) is scrolled into view, its actions under it with the focus."""
        frames = self.document().rootFrame().childFrames()
        if not frames:
            return
        shown = self.toolbar.index if self.toolbar.isVisible() and self.toolbar.index is not None else None
        at = (len(self.messages) if step < 0 else self.first_shown - 1) if shown is None else shown
        index = min(max(at + step, self.first_shown), self.first_shown + len(frames) - 1, len(self.messages) - 1)
        frame = frames[index - self.first_shown]
        rect = self.document().documentLayout().frameBoundingRect(frame)
        bar = self.verticalScrollBar()
        if rect.top() < bar.value() or rect.bottom() + 40 > bar.value() + self.viewport().height():
            bar.setValue(int(rect.bottom() + 40 - self.viewport().height()) if step > 0 else int(rect.top()))
        if self._offer(index, frame):
            self.toolbar.take_focus()
        else:
            self.toolbar.clear()

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

    def branch_step(self, index: int, step: int) -> None:
        """‹ or › under message `index`: ask for its sibling `step` away."""
        m = self.messages[index]
        siblings = m.branches or []
        at = siblings.index(m.id) if m.id in siblings else None
        if at is not None and 0 <= at + step < len(siblings) and self.idle:
            self.sig_branch.emit(siblings[at + step])

    def copy_message(self, index: int, markdown: bool = False) -> str:
        """Copy one message: an answer's Markdown as written, or any message as the plain text it
        reads as (Markdown rendered, then its text)."""
        from PySide6.QtGui import QGuiApplication, QTextDocument

        m = self.messages[index]
        text = m.content
        if not markdown and m.answer:
            doc = QTextDocument()
            doc.setHtml(markdown_html(text))
            text = doc.toPlainText().strip()
        QGuiApplication.clipboard().setText(text)
        return text

    def _on_link(self, url) -> None:
        """Only the view's own "copy", "cite" and "think" links do anything; links in model output are inert."""
        if url.scheme() == "more":
            self.show_earlier()
        elif url.scheme() == "info" and url.path().isdigit() and int(url.path()) < len(self.messages):
            # Why this tier answered: kept for those who want it, out of the status line.
            QToolTip.showText(QCursor.pos(), routing_text(self.messages[int(url.path())].stats), self)
        elif url.scheme() == "image" and url.path():
            self.sig_image.emit(url.path(), "")
        elif url.scheme() == "branch":
            i, _, step = url.path().partition(":")
            if i.isdigit() and int(i) < len(self.messages) and step in ("-1", "1"):
                self.branch_step(int(i), int(step))
        elif url.scheme() == "tool":
            i, _, n = url.path().partition(".")
            if i.isdigit() and n.isdigit() and int(i) < len(self.messages):
                m = self.messages[int(i)]
                if int(n) < len(m.steps) and m.steps[int(n)][0] == "tool":
                    block = m.steps[int(n)][1]
                    block.open = not block.open
                    m.rev += 1
                    self._render()
        elif url.scheme() == "think" and url.path().isdigit() and int(url.path()) < len(self.messages):
            m = self.messages[int(url.path())]
            m.think_open = not self._think_opened(m)
            m.rev += 1
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
        last = self.transcript.live
        if last is not None and last.think_t0 and last.think_s is None:
            second = int(time.monotonic() - last.think_t0)
            if second != last.think_shown:  # the "Thinking… N s" line counts up, once a second
                last.think_shown = second
                self._dirty = True
        if self._dirty:
            self._render()

    @staticmethod
    def _think_opened(m: Shown) -> bool:
        """An answer that is all thinking (a block never closed) shows it open: there is nothing
        else. Else it is folded until opened."""
        return m.think_open if m.think_open is not None else not m.content and not m.streaming

    def _thinking(self, i: int, m: Shown) -> tuple[str, str]:
        """(the header's chip, what goes above the text) for an answer's thinking: a finished
        answer says how long it thought in its header; one being written, on a line of its own."""
        if not m.answer or not (m.reasoning or m.stats.get("reasoning_tokens")):
            return "", ""
        opened = self._think_opened(m)
        if m.streaming:  # no header yet: "Thinking… N s" counts up until the answer begins
            seconds = m.think_s
            if seconds is None and m.think_t0:
                seconds = time.monotonic() - m.think_t0
            return "", thinking_html(m.reasoning, i, opened, seconds, m.think_s is None)
        ms = m.stats.get("reasoning_ms")
        seconds = ms / 1000 if ms else None
        if not m.stats.get("model"):  # no header to hold the chip
            return "", thinking_html(m.reasoning, i, opened, seconds, False)
        return thought_chip(i, opened, seconds), thinking_body(m.reasoning) if opened else ""

    # ---- images
    def _pictures(self, m: Shown) -> list[tuple[str, int, int]]:
        """(digest, width, height) of a message's thumbnails as drawn: the thumbnail's shape once it
        is made, a 4:3 box until then (drawn again when it arrives)."""
        out = []
        for digest in m.images:
            thumb = self.thumbnails.get(digest) if self.thumbnails is not None else None
            w, h = (thumb.width(), thumb.height()) if thumb is not None and thumb.height() else (4, 3)
            height = min(THUMB_H, h) if thumb is not None else THUMB_H
            out.append((digest, max(1, round(w * height / h)), height))
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
        shown = any(digest in m.images for m in self.messages)
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
            key = (m.serial, m.rev, m.content, tuple(pictures))
            if cached and not m.streaming and cached[0] == key:
                parts.append(cached[1])
                continue
            chip, thought = self._thinking(i, m)
            piece = message_html(m.role, m.content, m.stats, m.streaming, thinking=thought + steps_html(i, m.steps),
                                 index=i, branch=m.branch, images=images_html(pictures), chip=chip)
            if not m.streaming:
                self._cache[i] = (key, piece)
            parts.append(piece)
        live = bool(self.messages) and self.messages[-1].streaming
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

