"""The window as the README shows it (issue 27), in English and Chinese, light and dark: a chat
with an answer given again (‹ 2 / 2 ›), the toolbar of the message the pointer rests on, a file
attached in the message box; the empty window (the Presets dialog: test_presets_window.py). Each
is also checked: the parts are there, in the language asked for. ASSISTANT_SCREENSHOTS=
docs/screenshots refreshes the docs' copies."""

from __future__ import annotations

import pytest

from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, in_language, save_image, save_screenshot, screenshot_dir
from .test_message_actions import click, hover, settled

ANSWER = {"en": "Three ways, fastest first:\n\n| way | time |\n|---|---|\n| boil | 90 s |\n| steep | 4 min |\n\n"
                "```python\nprint('tea')\n```",
          "zh_CN": "三种方法，最快的在前：\n\n| 方法 | 时间 |\n|---|---|\n| 煮沸 | 90 秒 |\n| 浸泡 | 4 分钟 |\n\n"
                   "```python\nprint('茶')\n```"}
QUESTION = {"en": "How do I make tea quickly?", "zh_CN": "怎样快速泡茶？"}


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_screenshots_of_the_window(qtbot, fakes, make_assistant, tmp_path, language, theme):
    from app.theme import apply_theme

    out = screenshot_dir(tmp_path)
    model = str(fakes.model_file("m"))
    with in_language(language):
        apply_theme(theme)
        try:
            empty = fake_window(qtbot, lambda: make_assistant(model))
            save_screenshot(qtbot, empty, out / f"empty-{language}-{theme}.png", 1100, 720)
            assert empty.empty.isVisible() and empty.empty.buttons
            empty.close()

            w = fake_window(qtbot, lambda: make_assistant(model), max_tokens=200)
            fakes.script("m").enqueue(Answer("Boil water, pour, wait."), Answer(ANSWER[language]))
            w.composer.edit.setPlainText(QUESTION[language])
            w.composer.send_button.click()
            settled(qtbot, w)
            click(qtbot, w.view, 1, "regenerate")
            settled(qtbot, w)
            note = tmp_path / ("notes.md" if language == "en" else "笔记.md")
            note.write_text("# Tea\n\nGreen tea: 80 °C, two minutes.\n", encoding="utf-8")
            w.intake.attach_files([str(note)])
            qtbot.waitUntil(lambda: len(w.composer.attachments.items) == 1, timeout=20_000)
            w.resize(1100, 720)
            qtbot.wait(50)
            bar = hover(w.view, 1)
            assert bar.isVisible() and "2 / 2" in w.view.toPlainText()
            if language == "zh_CN":
                assert bar.button("regenerate").text() == "重新生成"
            save_screenshot(qtbot, w, out / f"window-{language}-{theme}.png", 1100, 720)
            w.close()
        finally:
            apply_theme("light")


def test_a_screenshot_that_cannot_be_written_fails(tmp_path):
    from PySide6.QtGui import QImage

    image = QImage(8, 8, QImage.Format_RGB32)
    image.fill(0)
    with pytest.raises(OSError, match="could not write the screenshot"):
        save_image(image, tmp_path / "no-such-folder" / "shot.png")
    save_image(image, tmp_path / "shot.png")
    assert QImage(str(tmp_path / "shot.png")).size() == image.size()
