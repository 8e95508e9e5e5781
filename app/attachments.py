"""Files attached to the message being written: a row of chips above the message box ("report.pdf ·
1 234 tokens ✕", or "· indexed for this chat, cited" for a large one; an image as its thumbnail ✕,
a click on it shows it whole), and a line that says what could not be attached and why. The files
are read off the GUI thread (the window's "attachments" Runner); this widget only shows them."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.a11y import describe
from app.i18n import tr
from app.theme import set_tone


CHIP_PX = 56  # an image chip's thumbnail height


@dataclass(frozen=True)
class ImageItem:
    """An image kept for the message (engine.api.keep_image's facts) and its thumbnail."""
    digest: str
    name: str
    width: int
    height: int
    thumb: QImage
    note: str = ""  # what changed on the way in: "first frame of 12", "scaled from 9000 × 6000"


class AttachmentBar(QWidget):
    sig_changed = Signal()
    sig_view = Signal(str, str)  # an image chip clicked: its digest and name, to show it whole

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("attachments")
        self.items: list = []  # engine.api Attachment
        self.images: list[ImageItem] = []
        self.row = QHBoxLayout()
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)  # chips go before it
        self.note = QLabel("")
        self.note.setObjectName("attachmentNote")
        self.note.setWordWrap(True)
        set_tone(self.note, "warn")
        self.note.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.row)
        layout.addWidget(self.note)
        self._chips: list[QWidget] = []
        self._draw()

    def add(self, attachment) -> None:
        if any(a.path == attachment.path for a in self.items):
            return
        self.items.append(attachment)
        self._draw()

    def add_image(self, image: ImageItem) -> None:
        if any(i.digest == image.digest for i in self.images):
            return  # the same picture twice is one image
        self.images.append(image)
        self._draw()

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.items):
            del self.items[index]
            self._draw()

    def remove_image(self, digest: str) -> None:
        self.images = [i for i in self.images if i.digest != digest]
        self._draw()

    def refuse(self, text: str) -> None:
        """Say why a file was not attached (the message being written is untouched)."""
        self.note.setText(text)
        self.note.show()

    def take(self) -> list:
        """The file attachments, handed over with the message; with `take_images`, the bar empties."""
        items, self.items = self.items, []
        self.note.hide()
        self._draw()
        return items

    def take_images(self) -> list[ImageItem]:
        images, self.images = self.images, []
        self._draw()
        return images

    def inline_tokens(self) -> int:
        return sum(a.tokens or 0 for a in self.items if a.inline)

    def _draw(self) -> None:
        for chip in self._chips:
            self.row.removeWidget(chip)
            chip.deleteLater()
        self._chips = []
        for k, a in enumerate(self.items):
            chip = QFrame()  # a frame: it draws the border the stylesheet gives it
            chip.setObjectName("attachmentChip")
            box = QHBoxLayout(chip)
            box.setContentsMargins(6, 2, 2, 2)
            size = (tr("{n} tokens").format(n=a.tokens) if a.inline and a.tokens is not None else
                    tr("in the message") if a.inline else tr("indexed for this chat, cited"))
            label = QLabel(f"{a.name} · {size}")
            label.setToolTip(a.path)
            close = describe(QToolButton(), tr("Remove {name}").format(name=a.name),
                             tr("Do not attach this file"))
            close.setText("✕")
            close.clicked.connect(lambda _=False, i=k: self.remove(i))
            box.addWidget(label)
            box.addWidget(close)
            set_tone(chip, "chip")
            self.row.insertWidget(self.row.count() - 1, chip)
            self._chips.append(chip)
        for image in self.images:
            chip = self._image_chip(image)
            self.row.insertWidget(self.row.count() - 1, chip)
            self._chips.append(chip)
        self.setVisible(bool(self.items or self.images) or not self.note.isHidden())
        self.sig_changed.emit()

    def _image_chip(self, image: ImageItem) -> QFrame:
        chip = QFrame()
        chip.setObjectName("imageChip")
        box = QHBoxLayout(chip)
        box.setContentsMargins(2, 2, 2, 2)
        box.setSpacing(2)
        view = describe(QToolButton(), tr("Show {name}").format(name=image.name),
                        tr("{w} × {h} pixels").format(w=image.width, h=image.height) +
                        (f" · {image.note}" if image.note else ""))
        pixmap = QPixmap.fromImage(image.thumb.scaledToHeight(int(CHIP_PX * self.devicePixelRatio()),
                                                              Qt.SmoothTransformation))
        pixmap.setDevicePixelRatio(self.devicePixelRatio())
        view.setIcon(pixmap)
        view.setIconSize(pixmap.deviceIndependentSize().toSize())
        view.setAutoRaise(True)
        view.setToolTip(f"{image.name} · {view.accessibleDescription()}")
        view.clicked.connect(lambda _=False, d=image.digest, n=image.name: self.sig_view.emit(d, n))
        close = describe(QToolButton(), tr("Remove {name}").format(name=image.name), tr("Do not send this image"))
        close.setText("✕")
        close.clicked.connect(lambda _=False, d=image.digest: self.remove_image(d))
        box.addWidget(view)
        box.addWidget(close, 0, Qt.AlignTop)
        set_tone(chip, "chip")
        return chip
