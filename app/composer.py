"""The composer, one rounded box: the attachments' chips, the message box, and a row of icon chips
(attach, and the window's documents / think / tools switches), a subtle token count and one round
button that sends, and stops while an answer is written. Enter sends, Shift+Enter starts a new
line, Up in an empty box edits the last message; files and images dropped or pasted in (a
screenshot pasted is an image), or attached with the paperclip; a live token count against the
context budget, exact (the L1 model's tokenizer: a vocabulary lookup that is safe beside the
model's thread and releases the GIL); per-message route override."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QImage
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QSizePolicy, QToolButton,
                               QVBoxLayout, QWidget)

from app.a11y import describe
from app.attachments import AttachmentBar
from app.i18n import tr
from app.icons import use
from app.model_picker import ModelPicker
from app.theme import set_tone

EDIT_MIN_H, EDIT_MAX_H = 44, 180  # the message box grows with its text, then scrolls
MAX_COUNT_CHARS = 20_000  # beyond this the count is "very long": counting a huge paste must not stall


class MessageEdit(QPlainTextEdit):
    submitted = Signal()
    edit_last = Signal()  # Up in an empty box: the last message back, to edit (as in a terminal)
    files = Signal(list)  # local files dropped or pasted (paths): attachments, not text
    image = Signal(QImage)  # image data pasted or dropped (a screenshot, a picture from a browser)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setAcceptDrops(True)

    def canInsertFromMimeData(self, source) -> bool:  # noqa: N802 - Qt's name
        return _takes(source) or super().canInsertFromMimeData(source)

    def dragEnterEvent(self, event):  # noqa: N802 - Qt's name
        if _takes(event.mimeData()):
            event.acceptProposedAction()
            return
        super().dragEnterEvent(event)

    def dragMoveEvent(self, event):  # noqa: N802 - Qt's name
        if _takes(event.mimeData()):
            event.acceptProposedAction()
            return
        super().dragMoveEvent(event)

    def dropEvent(self, event):  # noqa: N802 - Qt's name: files become attachments, never text
        if self._take(event.mimeData()):
            event.acceptProposedAction()
            return
        super().dropEvent(event)

    def insertFromMimeData(self, source) -> None:  # noqa: N802 - Qt's name; a paste lands here
        if not self._take(source):
            super().insertFromMimeData(source)

    def _take(self, source) -> bool:
        """Files or image data in `source` become attachments (True); text stays text (False).
        A file's path wins over the picture some file managers add beside it."""
        paths = _local_files(source)
        if paths:
            self.files.emit(paths)
            return True
        if source is not None and source.hasImage():
            image = source.imageData()
            if isinstance(image, QImage) and not image.isNull():
                self.image.emit(image)
                return True
        return False

    def keyPressEvent(self, event):  # noqa: N802 - Qt's name
        if event.key() in (Qt.Key_Return, Qt.Key_Enter) and not event.modifiers() & Qt.ShiftModifier:
            self.submitted.emit()
            return
        if event.key() == Qt.Key_Up and not event.modifiers() and not self.toPlainText():
            self.edit_last.emit()
            return
        super().keyPressEvent(event)


def _local_files(source) -> list[str]:
    if source is None or not source.hasUrls():
        return []
    return [u.toLocalFile() for u in source.urls() if u.isLocalFile()]


def _takes(source) -> bool:
    return bool(_local_files(source)) or (source is not None and source.hasImage())


def chip(name: str, text: str, icon_name: str, checkable: bool = True,
         button: QToolButton | None = None) -> QToolButton:
    """A switch inside the composer: an icon and a word, tinted with the accent while on (`button`:
    one to dress so, a QToolButton subclass with its own state)."""
    button = use(QToolButton() if button is None else button, icon_name, "muted", 16, on_tone="accent")
    button.setObjectName(name)
    button.setProperty("chip", True)
    button.setText(text)
    button.setToolButtonStyle(Qt.ToolButtonTextBesideIcon if text else Qt.ToolButtonIconOnly)
    button.setCheckable(checkable)
    return button


class Composer(QFrame):
    send = Signal(str, str)  # text, route ("auto" | "L1" | "L2" | "L3")
    stop = Signal()
    edit_last = Signal()
    files = Signal(list)  # files dropped, pasted or chosen: the window reads them off the GUI thread
    image = Signal(QImage)  # image data pasted or dropped: the window keeps it off the GUI thread
    attach = Signal()  # the paperclip: the window asks which files

    def __init__(self, count_tokens=None, parent=None):
        """`count_tokens(text)` → the exact count, or None while no model is loaded."""
        super().__init__(parent)
        self.setObjectName("composerBox")
        self.count_tokens = count_tokens or (lambda text: None)
        self.edit = MessageEdit()
        self.edit.setObjectName("messageEdit")
        self.edit.setPlaceholderText(tr("Message (Enter sends, Shift+Enter new line)"))
        self.edit.setFixedHeight(EDIT_MIN_H)
        self.edit.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Maximum)
        self.route = ModelPicker()  # the window shows it in the top bar: which model answers the chat
        self.count = QLabel("")
        self.count.setObjectName("tokenCount")
        set_tone(self.count, "hint")
        self.attach_button = chip("attachButton", "", "paperclip", checkable=False)
        self.attach_button.setToolTip(tr("Attach files or images (or drop them here, or paste a screenshot)"))
        self.attach_button.setAccessibleName(tr("Attach"))
        self.attach_button.clicked.connect(self.attach.emit)
        self.send_button = QToolButton()  # Send, and Stop while an answer is written: one place for the eye
        self.send_button.setObjectName("sendButton")
        self.send_button.setFixedSize(34, 34)
        self.answering = False  # the button stops the answer
        self.ready = False  # the engine takes a message
        self.row = QHBoxLayout()  # the chips: attach here, the window adds its switches (add_chip)
        self.row.setSpacing(4)
        self.row.addWidget(self.attach_button)
        self.row.addStretch(1)
        self.row.addWidget(self.count)
        self.row.addWidget(self.send_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 8, 8)
        layout.setSpacing(2)
        self.attachments = AttachmentBar()
        self.attachments.sig_changed.connect(self._update_count)
        self.sent_files: list[str] = []  # the last message's large attachments, indexed for its chat
        self.sent_images: list = []  # the last message's images (ImageItem), sent with it
        # route → the route to send images on, or None to keep them here (the window asks the user
        # when the chosen tier cannot read images); None: any route
        self.image_gate: Callable[[str], str | None] | None = None
        layout.addWidget(self.attachments)
        layout.addWidget(self.edit)
        layout.addLayout(self.row)
        self.edit.files.connect(self.files.emit)
        self.edit.image.connect(self.image.emit)
        self.edit.submitted.connect(self._submit)
        self.edit.edit_last.connect(self.edit_last.emit)
        self.send_button.clicked.connect(self._clicked)
        self._show_button()
        self.context_used = 0
        self.n_ctx = 0
        self._count_timer = QTimer(self)
        self._count_timer.setSingleShot(True)
        self._count_timer.setInterval(150)  # count after typing pauses, not per keystroke
        self._count_timer.timeout.connect(self._update_count)
        self.edit.textChanged.connect(self._count_timer.start)

    def _fit_height(self, size) -> None:
        """The box as tall as its text (a plain-text document's height is in lines)."""
        lines = max(1, int(size.height()))
        line = self.edit.fontMetrics().lineSpacing()
        margins = self.edit.contentsMargins()
        wanted = lines * line + 2 * self.edit.document().documentMargin() + margins.top() + margins.bottom() + 4
        self.edit.setFixedHeight(max(EDIT_MIN_H, min(EDIT_MAX_H, round(wanted))))

    def add_chip(self, widget: QWidget) -> None:
        """One of the window's switches, after the chips already there."""
        self.row.insertWidget(self.row.indexOf(self.count) - 1, widget)

    def set_busy(self, busy: bool, stoppable: bool = True) -> None:
        """An answer is written (the button stops it), or, with `stoppable` False, the engine is
        not ready (the button waits, disabled)."""
        self.answering = busy and stoppable
        self.ready = not busy
        self._show_button()

    def _show_button(self) -> None:
        stop = self.answering
        use(self.send_button, "square" if stop else "arrow-up", "accent_text", 18)
        self.send_button.setEnabled(self.ready or stop)
        name, what = ((tr("Stop"), tr("Stop the answer being written (Esc)")) if stop else
                      (tr("Send"), tr("Send the message (Enter)")))
        self.send_button.setToolTip(what)
        describe(self.send_button, name, what)

    def _clicked(self) -> None:
        if self.answering:
            self.stop.emit()
        else:
            self._submit()

    def set_context(self, used: int, n_ctx: int) -> None:
        self.context_used, self.n_ctx = used, n_ctx
        self._update_count()

    def _update_count(self) -> None:
        text = self.edit.toPlainText()
        if len(text) > MAX_COUNT_CHARS:
            self.count.setText(tr("very long message"))
            return
        n = self.count_tokens(text)
        if n is not None:
            n += self.attachments.inline_tokens()  # what the attached files add to the message
        if n is None:
            self.count.setText("")
        elif self.n_ctx:
            self.count.setText(tr("{n} tokens · context {used} / {ctx}").format(n=n, used=self.context_used + n,
                                                                              ctx=self.n_ctx))
        else:
            self.count.setText(tr("{n} tokens").format(n=n))

    def _submit(self) -> None:
        if not self.ready:
            return
        text = self.edit.toPlainText()
        if not text.strip() and not self.attachments.items and not self.attachments.images:
            return
        route = self.route.currentData()
        if self.attachments.images and self.image_gate is not None:
            route = self.image_gate(route)
            if route is None:
                return  # not sent: the text and the images stay in the box
        self.sent_images = self.attachments.take_images()
        files = self.attachments.take()
        # small files ride in the message; a large one is named there and indexed for the chat
        parts = [text.strip()] + [a.message_text() if a.inline else f"[Attached file: {a.name}]" for a in files]
        self.sent_files = [a.path for a in files if not a.inline]
        self.send.emit("\n\n".join(p for p in parts if p), route)
        self.edit.clear()
