"""Images in the window (issue 41): a screenshot pasted, an image file dropped and one picked with
"+" each become a thumbnail in the message box, kept in the data folder by digest (owner-only); a
damaged one is refused in words; a click on a thumbnail shows it whole. A tier that cannot read
images says so before anything is sent, and offers one that can; cancelled, the text and the
images stay in the box. Then a real send on the synthetic vision model (tests/vision_model.py):
the sent message shows its thumbnail, the transcript names the image, and an edit brings it back
into the box."""

from __future__ import annotations

import io
import os
import stat

from PIL import Image
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QColor, QDropEvent, QImage

from engine.api import kept_image_file
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, ready_window


def screenshot() -> QImage:
    image = QImage(320, 200, QImage.Format_RGB32)
    image.fill(QColor("#3d6fb6"))
    return image


def rotated_jpeg(path) -> None:
    """A 60 × 40 photo whose EXIF says "rotate 90°": it stands 40 × 60 once read."""
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.linear_gradient("L").resize((60, 40)).convert("CMYK").save(path, "JPEG", exif=exif)


def test_pasted_dropped_and_refused_images_and_a_tier_that_cannot_read_them(qtbot, fakes, make_assistant,
                                                                              tmp_path, monkeypatch):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model))
    bar = w.composer.attachments
    w.composer.edit.setPlainText("What is on these?")
    # a screenshot pasted: image data, no file
    pasted = QMimeData()
    pasted.setImageData(screenshot())
    w.composer.edit.insertFromMimeData(pasted)
    qtbot.waitUntil(lambda: len(bar.images) == 1, timeout=20_000)
    shot = bar.images[0]
    assert (shot.width, shot.height) == (320, 200) and not shot.thumb.isNull()
    kept = kept_image_file(shot.digest)
    assert kept is not None and stat.S_IMODE(os.stat(kept).st_mode) == 0o600
    # a photo file dropped (CMYK, EXIF-rotated), the same screenshot again, and a damaged file
    photo, broken = tmp_path / "photo.jpg", tmp_path / "broken.png"
    rotated_jpeg(photo)
    whole = io.BytesIO()
    Image.effect_noise((64, 64), 40).save(whole, "PNG")
    broken.write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])  # cut off half way
    dropped = QMimeData()
    dropped.setUrls([QUrl.fromLocalFile(str(photo))])
    w.composer.edit.dropEvent(QDropEvent(QPointF(10, 10), Qt.CopyAction, dropped, Qt.LeftButton, Qt.NoModifier))
    qtbot.waitUntil(lambda: len(bar.images) == 2, timeout=20_000)
    assert (bar.images[1].width, bar.images[1].height) == (40, 60)  # EXIF honoured
    w.composer.edit.insertFromMimeData(pasted)
    w.attach_files([str(broken)])  # as the "+" button's file dialog hands them over
    qtbot.waitUntil(lambda: "broken.png" in bar.note.text(), timeout=20_000)
    assert "damaged" in bar.note.text() and len(bar.images) == 2
    assert w.composer.edit.toPlainText() == "What is on these?"
    # a click on a thumbnail shows it whole
    viewer = w.view_image(shot.digest, "pasted image")
    qtbot.waitUntil(lambda: viewer.picture.pixmap() is not None and not viewer.picture.pixmap().isNull(),
                    timeout=20_000)
    assert viewer.picture.pixmap().width() == 320
    viewer.close()
    # no tier reads images: sending says so, offers Models, and keeps everything in the box
    asked = []
    monkeypatch.setattr(w, "confirm", lambda title, text: asked.append(text) or False)
    assert w.vision_levels == []
    w.composer.send_button.click()
    assert asked and "None of your models reads images" in asked[-1]
    assert not w.view.messages and len(bar.images) == 2 and w.composer.edit.toPlainText() == "What is on these?"
    # L1 chosen, L2 reads images: L1 is named and L2 offered
    w.vision_levels = ["L2"]
    w.composer.route.setCurrentIndex(w.composer.route.findData("L1"))
    w.composer.send_button.click()
    assert "cannot read images" in asked[-1] and "L2" in asked[-1] and not w.view.messages
    assert len(bar.images) == 2
    w.close()


def test_an_image_message_on_a_vision_model_shows_its_thumbnail_and_an_edit_brings_it_back(qtbot, assistant_home):
    from tests import vision_model as vm

    model, _ = vm.vision_pair()
    w = ready_window(qtbot, str(model), n_ctx=2048, max_tokens=4)
    assert w.vision_levels  # the projector beside the model: its tier reads images
    pasted = QMimeData()
    data = io.BytesIO()
    Image.linear_gradient("L").resize((100, 80)).convert("RGB").save(data, "PNG")
    pasted.setImageData(QImage.fromData(data.getvalue(), "PNG"))
    w.composer.edit.insertFromMimeData(pasted)
    bar = w.composer.attachments
    qtbot.waitUntil(lambda: len(bar.images) == 1, timeout=20_000)
    digest = bar.images[0].digest
    w.composer.edit.setPlainText("Describe the picture.")
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy, timeout=120_000)
    assert not w.banner.isVisible(), w.banner.text()
    sent = w.view.messages[-2]
    assert sent["role"] == "user" and [i["digest"] for i in sent["images"]] == [digest]
    assert not bar.images  # they went with the message
    qtbot.waitUntil(lambda: w.view.thumbnails.get(digest) is not None, timeout=20_000)
    assert f"thumb:{digest}" in w.view.toHtml()
    rows = []
    cid = w.conversation_id
    w.worker.call(lambda a: a.transcript(cid), rows.extend)
    qtbot.waitUntil(lambda: bool(rows), timeout=20_000)
    assert [i["digest"] for i in next(r for r in rows if r["role"] == "user")["images"]] == [digest]
    shown = []
    w.view.sig_image.connect(lambda d, _name: shown.append(d))
    w.view._on_link(QUrl(f"image:{digest}"))
    assert shown == [digest]
    w.edit_message(len(w.view.messages) - 2)  # the image comes back with the text, to send again
    qtbot.waitUntil(lambda: [i.digest for i in bar.images] == [digest], timeout=20_000)
    assert w.composer.edit.toPlainText() == "Describe the picture."
    w.close()
