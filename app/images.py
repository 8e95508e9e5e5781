"""Images in the window: their thumbnails (made off the GUI thread, from the pixels the model reads,
kept in memory) and the viewer a click on one opens. The engine keeps the files
(engine.api.keep_image); here they are only shown."""

from __future__ import annotations

from collections import OrderedDict

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication, QImage, QKeySequence, QPixmap, QShortcut
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QScrollArea, QVBoxLayout

from app.background import Runner
from app.i18n import tr
from engine.api import InputError, image_preview

THUMB_PX = 160   # a thumbnail's longer side as made; the chat draws it at up to 120 px, the box at 56
VIEW_PX = 2048   # the viewer's picture: the screen it fits on is rarely larger
KEEP = 256       # thumbnails kept in memory (~100 KB each at most)


class Thumbnails(QObject):
    """digest → a small QImage, made on the "images" thread; `sig_ready(digest)` when one arrives
    (or fails: `get` then gives None and `failed` says why)."""

    sig_ready = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.runner: Runner | None = None
        self._images: OrderedDict[str, QImage] = OrderedDict()
        self._asked: set[str] = set()
        self.failed: dict[str, str] = {}

    def get(self, digest: str) -> QImage | None:
        """The thumbnail if made; else None, and it is asked for."""
        image = self._images.get(digest)
        if image is not None:
            self._images.move_to_end(digest)
            return image
        if digest not in self._asked and digest not in self.failed:
            self._asked.add(digest)
            self._runner().run(lambda: decode_png(image_preview(digest, THUMB_PX)),
                               lambda img: self._made(digest, img), lambda exc: self._lost(digest, exc))
        return None

    def put(self, digest: str, image: QImage) -> None:
        """A thumbnail made elsewhere (the message box's, as the image was attached)."""
        self._images[digest] = image
        self._images.move_to_end(digest)
        while len(self._images) > KEEP:
            self._images.popitem(last=False)

    def _made(self, digest: str, image: QImage) -> None:
        self._asked.discard(digest)
        self.put(digest, image)
        self.sig_ready.emit(digest)

    def _lost(self, digest: str, exc: BaseException) -> None:
        self._asked.discard(digest)
        self.failed[digest] = str(exc) if isinstance(exc, InputError) else type(exc).__name__
        self.sig_ready.emit(digest)

    def _runner(self) -> Runner:
        if self.runner is None:
            self.runner = Runner("images", self)
        return self.runner

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


def decode_png(png: bytes) -> QImage:
    """PNG bytes into a QImage, on the thread that made them (QImage, unlike QPixmap, may be)."""
    image = QImage.fromData(png, "PNG")
    if image.isNull():
        raise InputError("the preview could not be drawn")
    return image


class ImageViewer(QDialog):
    """One image, whole: fitted to the screen, scrolled when larger; Esc or Close leaves."""

    def __init__(self, digest: str, name: str = "", runner: Runner | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("imageViewer")
        self.setWindowTitle(name or tr("Image"))
        self.digest = digest
        self.picture = QLabel(tr("Loading the image…"))
        self.picture.setAlignment(Qt.AlignCenter)
        self.picture.setAccessibleName(tr("The image, whole"))
        scroll = QScrollArea()
        scroll.setWidget(self.picture)
        scroll.setWidgetResizable(True)
        scroll.setAlignment(Qt.AlignCenter)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addWidget(buttons)
        QShortcut(QKeySequence(Qt.Key_Escape), self, self.reject)
        screen = (parent.screen() if parent is not None else QGuiApplication.primaryScreen()).availableGeometry()
        self.fit = (int(screen.width() * 0.85), int(screen.height() * 0.8))
        self.resize(min(900, self.fit[0]), min(700, self.fit[1]))
        self.runner = runner
        if runner is not None:
            runner.run(lambda: decode_png(image_preview(digest, VIEW_PX)), self.show_image, self._failed)

    def show_image(self, image: QImage) -> None:
        pixmap = QPixmap.fromImage(image)
        w, h = self.fit
        if pixmap.width() > w or pixmap.height() > h:
            pixmap = pixmap.scaled(w, h, Qt.KeepAspectRatio, Qt.SmoothTransformation)
        self.picture.setPixmap(pixmap)
        self.resize(max(320, min(pixmap.width() + 40, w)), max(240, min(pixmap.height() + 80, h)))

    def _failed(self, exc: BaseException) -> None:
        why = str(exc) if isinstance(exc, InputError) else type(exc).__name__
        self.picture.setText(tr("The image could not be shown: {why}").format(why=why))
