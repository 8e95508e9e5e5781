"""What goes into the message box besides its text, and which tier reads it.

Files dropped, pasted or attached are read off the GUI thread (the "attachments" Runner, through
engine.api's `read_attachment`: the documents' parser) and shown as a chip, or refused with the
reason; the message being written is never touched. Images (issue 41), dropped, pasted (a
screenshot) or attached with the "+" button, are kept off the GUI thread (engine.api.keep_image:
the file goes to the data folder under the digest of its pixels) and shown as a thumbnail in the
box; sent with the message, shown in the sent message (a click opens the whole image). Before
sending, a tier whose model cannot read images says so and offers one that can. GUI thread only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QBuffer, QIODevice
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog, QWidget

from app.attachments import ImageItem
from app.background import Runner
from app.i18n import tr
from app.images import THUMB_PX, ImageViewer, Thumbnails, decode_png
from app.render import model_label
from engine.api import (MAX_IMAGE_BYTES, MAX_IMAGES, AttachmentError, InputError, is_image_file, keep_image,
                        kept_image_file, read_attachment)


class Intake:
    """The composer's files and images, and the view's thumbnails. `say` is the status line,
    `confirm(title, text)` a yes/no question, `open_models` the Models dialog, `documents_on()`
    whether a large file can be indexed for the chat. `vision_levels`: the tiers whose model reads
    images, as the engine last said; `tier_models`: each tier's model."""

    def __init__(self, parent: QWidget, worker, composer, view, say: Callable[[str], None],
                 confirm: Callable[[str, str], bool], open_models: Callable[[], None],
                 documents_on: Callable[[], bool]):
        self.parent, self.worker, self.composer, self.view = parent, worker, composer, view
        self.say, self.confirm, self.open_models, self.documents_on = say, confirm, open_models, documents_on
        self.attach_runner: Runner | None = None
        self.image_runner: Runner | None = None
        self.vision_levels: list[str] = []
        self.tier_models: dict[str, str] = {}
        self.thumbnails = Thumbnails(parent)
        view.thumbnails = self.thumbnails
        self.thumbnails.sig_ready.connect(view.thumbnail_ready)
        view.sig_image.connect(self.view_image)
        composer.files.connect(self.attach_files)  # dropped or pasted files
        composer.image.connect(self.keep_pasted)
        composer.attach.connect(self.choose_files)
        composer.attachments.sig_view.connect(self.view_image)
        composer.image_gate = self.image_route

    # ---- files
    def attach_files(self, paths: list[str]) -> None:
        """Documents to read; images go to `attach_image_files`."""
        images = [p for p in paths if is_image_file(p)]
        if images:
            self.attach_image_files(images)
        paths = [p for p in paths if not is_image_file(p)]
        if not paths:
            return
        if self.attach_runner is None:
            self.attach_runner = Runner("attachments", self.parent)
        count = self.worker.count_tokens  # the L1 vocabulary alone: safe off the engine thread
        bar = self.composer.attachments
        for path in paths:
            self.attach_runner.run(lambda p=path: read_attachment(p, count), self._attached,
                                   lambda exc, p=path: bar.refuse(_why(exc, p)))

    def _attached(self, attachment) -> None:
        """A file read: a chip, unless it is too large for the message while documents are off
        (it could not be indexed for the chat): then refused now, not when the message is sent."""
        bar = self.composer.attachments
        if not attachment.inline and not self.documents_on():
            bar.refuse(tr("Not attached: {name} is too large to go into the message, and documents are off "
                          "(setting docs.enabled), so it cannot be indexed for this chat").format(name=attachment.name))
            return
        bar.add(attachment)

    def close(self) -> None:
        for part in (self.attach_runner, self.image_runner, self.thumbnails):
            if part is not None:
                part.close()

    # ---- images
    def _image_runner(self) -> Runner:
        if self.image_runner is None:
            self.image_runner = Runner("image-intake", self.parent)
        return self.image_runner

    # ---- in: files, pasted pictures, the "+" button
    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self.parent, tr("Attach files or images"))
        if paths:
            self.attach_files(paths)

    def attach_image_files(self, paths: list[str]) -> None:
        for path in paths:
            self._image_runner().run(lambda p=path: _kept(_read(p), Path(p).name), self._image_kept,
                                     self._image_refused)

    def keep_pasted(self, image: QImage) -> None:
        """A pasted or dropped picture: saved as PNG and kept, off the GUI thread."""
        copy = QImage(image)  # implicitly shared: the other thread's reference keeps it alive
        self._image_runner().run(lambda: _kept(_png(copy), tr("pasted image")), self._image_kept,
                                 self._image_refused)

    def reattach_images(self, digests: list[str]) -> None:
        """A sent message's images back in the box (its edit sends them again)."""
        for digest in digests:
            self._image_runner().run(lambda d=digest: _stored(d), self._image_kept, self._image_refused)

    def _image_kept(self, item: ImageItem) -> None:
        bar = self.composer.attachments
        if len(bar.images) >= MAX_IMAGES and all(i.digest != item.digest for i in bar.images):
            bar.refuse(tr("Not attached: at most {n} images go in one message").format(n=MAX_IMAGES))
            return
        self.thumbnails.put(item.digest, item.thumb)
        bar.add_image(item)
        if not self.vision_levels:
            self.say(tr("None of your models reads images yet: sending will say how to get one"))

    def _image_refused(self, exc: BaseException) -> None:
        why = str(exc) if isinstance(exc, (InputError, OSError)) else type(exc).__name__
        self.composer.attachments.refuse(tr("Not attached: {why}").format(why=why))

    # ---- out: which tier reads them, and showing them
    def refresh_vision(self) -> None:
        """Ask the engine which tiers read images (after settings change; the engine's ready
        message says it first)."""
        self.worker.call(lambda a: {"vision": a.vision_tiers(), "tiers": dict(a.tiers), "fits": a.tier_fits()},
                         self.on_vision)

    def on_vision(self, info: dict) -> None:
        """The engine's tiers: which read images, their models and how each fits (the picker)."""
        self.vision_levels = list(info.get("vision") or [])
        self.tier_models = dict(info.get("tiers") or {})
        self.composer.route.set_tiers(self.tier_models, info.get("fits") or {})

    def image_route(self, route: str) -> str | None:
        """The route to send a message with images on, or None to keep it in the box. Auto goes
        to a tier that reads images by itself (the router); a chosen tier that cannot is named,
        and one that can is offered."""
        levels = self.vision_levels
        if route in levels or (route == "auto" and levels):
            return route
        tiers = self.tier_models
        if levels:
            other = "L2" if "L2" in levels else levels[0]
            name = lambda lvl: f"{lvl} · {model_label(tiers[lvl])}" if tiers.get(lvl) else lvl  # noqa: E731
            if self.confirm(tr("This model cannot read images"), tr(
                    "{tier} cannot read images. Send this message to {other}, which can?").format(
                    tier=name(route), other=name(other))):
                return other
            self.say(tr("Not sent: the message and its images are still in the box"))
            return None
        if self.confirm(tr("No model reads images"), tr(
                "None of your models reads images. A vision model (for example SmolVLM2 on the CPU) comes "
                "with a projector file that lets it see them. Open Models to get one?\n\nThe message and "
                "its images stay in the box.")):
            self.open_models()
        return None

    def view_image(self, digest: str, name: str = "") -> ImageViewer:
        viewer = ImageViewer(digest, name, self._image_runner(), self.parent)
        viewer.show()
        return viewer


def _why(exc: BaseException, path: str) -> str:
    if isinstance(exc, AttachmentError):
        return tr("Not attached: {why}").format(why=exc)
    return tr("Not attached: {path} could not be read ({why})").format(path=path, why=type(exc).__name__)


def _read(path: str) -> bytes:
    """A file's bytes, refused before reading when it is larger than an image may be."""
    size = os.path.getsize(path)
    if size > MAX_IMAGE_BYTES:
        raise InputError(tr("{name} is {mb:.1f} MB; images up to {limit} MB can be sent").format(
            name=Path(path).name, mb=size / 2**20, limit=MAX_IMAGE_BYTES >> 20))
    with open(path, "rb") as f:
        return f.read()


def _png(image: QImage) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


def _kept(data: bytes, name: str) -> ImageItem:
    """Keep the image (the engine's checks and store) and make its thumbnail: both off the GUI thread."""
    facts = keep_image(data, name, preview=THUMB_PX)  # one decode for both
    notes = []
    if facts["frames"] > 1:
        notes.append(tr("first frame of {n}").format(n=facts["frames"]))
    if facts["scaled_from"]:
        notes.append(tr("scaled from {w} × {h}").format(w=facts["scaled_from"][0], h=facts["scaled_from"][1]))
    thumb = decode_png(facts["preview"])
    return ImageItem(facts["digest"], name, facts["width"], facts["height"], thumb, ", ".join(notes))


def _stored(digest: str) -> ImageItem:
    path = kept_image_file(digest)
    if path is None:
        raise InputError(tr("an image of this message is no longer in the data folder"))
    return _kept(path.read_bytes(), path.name)
