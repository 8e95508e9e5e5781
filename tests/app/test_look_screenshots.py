"""Screenshots of the window's look (issue 42) at 1280×800, in English and Chinese, light and dark:
the first run, a chat with a table, code, thinking and a tool call, the composer with a file and an
image attached, and each page (Documents and Tools in the main area, Models and Settings as
dialogs). Each is also checked: the part it shows is there. ASSISTANT_SCREENSHOTS=docs/screenshots
refreshes docs/app.md's copies (the 2× window: test_high_dpi.py)."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QImage, QPainter

from app.transcript import Shown, ToolBlock
from engine.api import Settings
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, in_language, save_image, save_screenshot, screenshot_dir

W, H = 1280, 800
ANSWER = {"en": "Three ways, fastest first:\n\n| way | time |\n|---|---|\n| kettle | 90 s |\n| steep | 4 min |\n\n"
                "> Green tea wants 80 °C, not boiling.\n\n```python\ndef brew(minutes: int = 4) -> str:\n"
                "    return f'steep for {minutes} min'\n```",
          "zh_CN": "三种方法，最快的在前：\n\n| 方法 | 时间 |\n|---|---|\n| 电水壶 | 90 秒 |\n| 浸泡 | 4 分钟 |\n\n"
                   "> 绿茶要 80 °C，不要沸水。\n\n```python\ndef brew(minutes: int = 4) -> str:\n"
                   "    return f'泡 {minutes} 分钟'\n```"}
QUESTION = {"en": "How do I make tea quickly?", "zh_CN": "怎样快速泡茶？"}
THOUGHT = {"en": "The user wants speed. A kettle is fastest; green tea needs cooler water.",
           "zh_CN": "用户想要快。电水壶最快；绿茶要稍凉的水。"}


def chat_messages(language: str) -> list[Shown]:
    """A stored-looking transcript: the answer thought for 12 s and called a tool first."""
    stats = {"level": "L2", "model": "qwen3-4b", "reasoning_tokens": 48, "reasoning_ms": 12_000, "ttft_ms": 180,
             "decode_tps": 31.5, "prompt_tokens_evaluated": 24, "prompt_tokens_cached": 310,
             "route_reason": "ordinary request"}
    call = ToolBlock("c1", "builtin", "calculator", '{"expression": "90/60"}', "ok", "1.5", 0.01)
    return [Shown("user", QUESTION[language]),
            Shown("assistant", ANSWER[language], stats=stats, reasoning=THOUGHT[language], steps=[("tool", call)])]


def png(path) -> str:
    image = QImage(320, 200, QImage.Format_RGB32)
    image.fill(QColor("#4f8a5b"))
    image.save(str(path))
    return str(path)


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_screenshots_of_the_look(qtbot, fakes, make_assistant, tmp_path, monkeypatch, language, theme):
    from app.model_manager import ModelManagerDialog
    from app.settings_dialog import SettingsDialog
    from app.theme import apply_theme

    out = screenshot_dir(tmp_path)
    model = str(fakes.model_file("m"))
    name = f"{language}-{theme}"
    with in_language(language):
        apply_theme(theme)
        try:
            Settings.shared().set("ui.welcome_done", False)
            monkeypatch.setattr("app.welcome.welcome_needed", lambda *_a: True)  # the fake engine names a model
            first = fake_window(qtbot, lambda: make_assistant(model), welcome_done=False)
            save_screenshot(qtbot, first, out / f"look-first-run-{name}.png", W, H)
            assert first.doors.welcome is not None and first.doors.welcome.isVisible()
            first.doors.welcome.close_work()
            first.close()

            w = fake_window(qtbot, lambda: make_assistant(model))
            fakes.script("m").enqueue(Answer("Boil water."))
            w.composer.edit.setPlainText(QUESTION[language])
            w.composer.send_button.click()
            qtbot.waitUntil(lambda: not w.busy, timeout=20_000)
            w.view.set_messages(chat_messages(language))
            save_screenshot(qtbot, w, out / f"look-chat-{name}.png", W, H)
            text = w.view.toPlainText()
            assert "qwen3-4b" in text and "calculator" in text and "brew" in text

            note = tmp_path / ("notes.md" if language == "en" else "笔记.md")
            note.write_text("# Tea\n\nGreen tea: 80 °C, two minutes.\n", encoding="utf-8")
            w.intake.attach_files([str(note), png(tmp_path / "teapot.png")])
            qtbot.waitUntil(lambda: bool(w.composer.attachments.items and w.composer.attachments.images), timeout=20_000)
            w.composer.edit.setPlainText(QUESTION[language])
            save_screenshot(qtbot, w, out / f"look-composer-{name}.png", W, H)
            w.top_bar.toggle.click()  # the resources indicator: the gauges as a popover under it
            popover = w.resources.popover
            qtbot.waitUntil(lambda: "MiB" in w.gauges.ram_app.text() or w.gauges.ram_app.value() > 0, timeout=5_000)
            shot = w.grab().toImage()
            painter = QPainter(shot)  # a popup is a window of its own: drawn where it shows
            painter.drawImage(w.mapFromGlobal(popover.pos()), popover.grab().toImage())
            painter.end()
            save_image(shot, out / f"look-resources-{name}.png")
            assert popover.isVisible() and popover.isAncestorOf(w.gauges)
            popover.hide()

            for page, opener in (("documents", w.open_documents), ("tools", w.open_tools)):
                shown = opener()
                save_screenshot(qtbot, w, out / f"look-{page}-{name}.png", W, H)
                assert w.rail.buttons[page].isChecked() and shown.isVisible()
            w.open_chats()
            for page, dialog in (("models", ModelManagerDialog(Settings.shared(), w)),
                                 ("settings", SettingsDialog(Settings.shared(), w))):
                dialog.show()
                qtbot.wait(50)
                save_image(dialog.grab().toImage(), out / f"look-{page}-{name}.png")
                dialog.close()
            w.close()
        finally:
            apply_theme("light")
