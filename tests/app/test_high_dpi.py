"""A high-DPI screen (issue 27: "High-DPI sharp"). Text and the stylesheet's shapes are drawn at the
screen's scale by Qt itself; what can blur is a raster image made at one size. Every icon the window
shows must offer one drawn for a 2× screen (Qt does not scale a smaller one up: it hands it over
small). The window drawn at 2× (English, and Chinese in the bundled CJK font) is what
docs/screenshots/window-hidpi-*.png shows."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSize
from PySide6.QtGui import QAction, QIcon, QPixmap
from PySide6.QtWidgets import QAbstractButton, QListWidget

from app.sidebar import _pin_pixmap, pin_icon
from app.theme import colour
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, in_language, save_image, screenshot_dir

QUESTION = {"en": "How do I make tea quickly?", "zh_CN": "怎样快速泡茶？"}
ANSWER = {"en": "Boil water, pour it over the leaves, wait **two minutes**.",
          "zh_CN": "烧开水，倒在茶叶上，等**两分钟**。"}


def icons_of(window) -> list[tuple[str, object]]:
    """(where, QIcon) for every icon on a button, an action or a list row of the window."""
    found = []
    for button in window.findChildren(QAbstractButton):
        found.append((f"button {button.objectName() or button.text()!r}", button.icon()))
    for action in window.findChildren(QAction):
        found.append((f"action {action.text()!r}", action.icon()))
    for view in window.findChildren(QListWidget):
        found += [(f"row {view.item(i).text()!r}", view.item(i).icon()) for i in range(view.count())]
    found.append(("the window", window.windowIcon()))
    return [(where, icon) for where, icon in found if not icon.isNull()]


def test_the_pin_mark_is_drawn_for_each_scale_not_scaled_up_and_shows_on_a_selected_row(qapp):
    icon = pin_icon()
    for scale, device in ((1.0, 16), (1.5, 24), (2.0, 32), (3.0, 48)):
        for mode, fill in ((QIcon.Normal, colour("accent")), (QIcon.Selected, colour("accent_text"))):
            pixmap = icon.pixmap(QSize(16, 16), scale, mode)
            assert (pixmap.width(), pixmap.height()) == (device, device), scale
            assert pixmap.toImage() == _pin_pixmap(device, fill).toImage()  # the drawing of that size
    assert colour("accent_text") != colour("accent")  # a selected row's background is the accent


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_every_icon_has_a_2x_drawing_and_the_window_draws_at_2x(qtbot, fakes, make_assistant, tmp_path, language):
    out = screenshot_dir(tmp_path)
    model = str(fakes.model_file("m"))
    with in_language(language):
        w = fake_window(qtbot, lambda: make_assistant(model))
        fakes.script("m").enqueue(Answer(ANSWER[language]))
        w.composer.edit.setPlainText(QUESTION[language])
        w.composer.send_button.click()
        qtbot.waitUntil(lambda: not w.busy, timeout=20_000)
        cid = w.conversation_id
        w.worker.call(lambda a: a.pin_conversation(cid, True), lambda _: w.worker.refresh())
        qtbot.waitUntil(lambda: any(not i.icon().isNull() for i in w.sidebar.chat_items()), timeout=10_000)
        w.resize(1100, 720)
        qtbot.wait(50)
        blurred = [where for where, icon in icons_of(w) if icon.pixmap(QSize(16, 16), 2.0).width() < 32]
        assert not blurred, f"icons with no 2× drawing: {blurred}"

        sharp = QPixmap(QSize(2200, 1440))
        sharp.setDevicePixelRatio(2.0)
        w.render(sharp)
        image = sharp.toImage()
        assert (image.width(), image.height()) == (2200, 1440)
        save_image(image, out / f"window-hidpi-{language}.png")
        w.close()
