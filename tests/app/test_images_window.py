"""Images in the window (issue 41): a screenshot pasted, an image file dropped and one picked with
"+" each become a thumbnail in the message box, kept in the data folder by digest (owner-only); a
damaged one is refused in words; a click on a thumbnail shows it whole. A tier that cannot read
images says so before anything is sent, and offers one that can; cancelled, the text and the
images stay in the box. Then a real send on the synthetic vision model (tests/vision_model.py):
the sent message shows its thumbnail, the transcript names the image, and an edit brings it back
into the box. Screenshots in English and Chinese (ASSISTANT_SCREENSHOTS=docs/screenshots refreshes
the docs' copies)."""

from __future__ import annotations

import io
import os
import stat

import pytest
from PIL import Image, ImageDraw
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QColor, QDropEvent, QImage

from engine.api import keep_image, kept_image_file
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, in_language, ready_window, save_screenshot, screenshot_dir


def screenshot() -> QImage:
    """A 320 × 200 "screenshot": a title bar over lines of text."""
    from PySide6.QtGui import QPainter

    image = QImage(320, 200, QImage.Format_RGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    p.fillRect(0, 0, 320, 28, QColor("#3d6fb6"))
    for k in range(7):
        p.fillRect(16, 44 + k * 20, 288 - (k * 37) % 120, 8, QColor("#9aa5b1"))
    p.end()
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
    w.intake.attach_files([str(broken)])  # as the "+" button's file dialog hands them over
    qtbot.waitUntil(lambda: "broken.png" in bar.note.text(), timeout=20_000)
    assert "damaged" in bar.note.text() and len(bar.images) == 2
    assert w.composer.edit.toPlainText() == "What is on these?"
    # a click on a thumbnail shows it whole
    viewer = w.intake.view_image(shot.digest, "pasted image")
    qtbot.waitUntil(lambda: viewer.picture.pixmap() is not None and not viewer.picture.pixmap().isNull(),
                    timeout=20_000)
    assert viewer.picture.pixmap().width() == 320
    viewer.close()
    # no tier reads images: sending says so, offers Models, and keeps everything in the box
    asked = []
    monkeypatch.setattr(w, "confirm", lambda title, text: asked.append(text) or False)
    assert w.intake.vision_levels == []
    w.composer.send_button.click()
    assert asked and "None of your models reads images" in asked[-1]
    assert not w.view.messages and len(bar.images) == 2 and w.composer.edit.toPlainText() == "What is on these?"
    # L1 chosen, L2 reads images: L1 is named and L2 offered
    w.intake.vision_levels = ["L2"]
    w.composer.route.setCurrentIndex(w.composer.route.findData("L1"))
    w.composer.send_button.click()
    assert "cannot read images" in asked[-1] and "L2" in asked[-1] and not w.view.messages
    assert len(bar.images) == 2
    w.close()


def test_an_image_message_on_a_vision_model_shows_its_thumbnail_and_an_edit_brings_it_back(qtbot, assistant_home):
    from tests import vision_model as vm

    model, _ = vm.vision_pair()
    w = ready_window(qtbot, str(model), n_ctx=2048, max_tokens=4)
    assert w.intake.vision_levels  # the projector beside the model: its tier reads images
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
    assert sent.role == "user" and sent.images == [digest]
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


def chart() -> bytes:
    """A bar chart, as a user would paste one."""
    image = Image.new("RGB", (480, 300), "white")
    draw = ImageDraw.Draw(image)
    for k, (h, colour) in enumerate([(120, "#3d6fb6"), (200, "#e07b39"), (160, "#59a14f"), (240, "#b07aa1")]):
        draw.rectangle([60 + k * 100, 270 - h, 120 + k * 100, 270], fill=colour)
    draw.line([40, 270, 460, 270], fill="black", width=2)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


ASKED = {"en": ("Which quarter had the highest sales?", "The fourth bar is the tallest: the fourth quarter had the "
                "highest sales, about twice the first.", "And this one?"),
         "zh_CN": ("哪个季度销售额最高？", "第四根柱子最高：第四季度销售额最高，约为第一季度的两倍。", "这张呢？")}


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_screenshots_of_an_image_chat(qtbot, fakes, make_assistant, tmp_path, language):
    """A stored chat whose message has an image (as an API client or an earlier session left it),
    and a screenshot pasted into the box for the next message."""
    out = screenshot_dir(tmp_path)
    model = str(fakes.model_file("m"))
    question, answer, follow_up = ASKED[language]
    with in_language(language):
        w = fake_window(qtbot, lambda: make_assistant(model))
        digest = keep_image(chart(), "chart.png")["digest"]
        made = []
        w.worker.call(lambda a: a.new_conversation_from([("user", question, {"images": [{"digest": digest, "at": 0}]}),
                                                         ("assistant", answer)]), made.append, refresh=True)
        qtbot.waitUntil(lambda: bool(made), timeout=20_000)
        w._select(made[0])
        qtbot.waitUntil(lambda: len(w.view.messages) == 2 and w.view.thumbnails.get(digest) is not None,
                        timeout=20_000)
        pasted = QMimeData()
        pasted.setImageData(screenshot())
        w.composer.edit.insertFromMimeData(pasted)
        qtbot.waitUntil(lambda: len(w.composer.attachments.images) == 1, timeout=20_000)
        w.composer.edit.setPlainText(follow_up)
        qtbot.wait(100)  # the thumbnail's redraw
        assert f"thumb:{digest}" in w.view.toHtml()
        save_screenshot(qtbot, w, out / f"image-chat-{language}.png", 1100, 720)
        w.close()
