"""Presets in the window (issue 27), driven as a user would on the scripted fake backend: made and
saved in the Presets dialog, used for new chats, its system prompt, temperature, tier and tools in
the chat's turns; another chosen for an existing chat in the top bar's picker, and shown again
when the chat is selected; exported and imported as JSON; a wrong field said and the typed text
kept."""

from __future__ import annotations

import pytest

from engine.api import Settings
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window



@pytest.fixture
def window(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model), temperature=0.3)
    yield w
    w.close()


def text_of(prompt: list[int]) -> bytes:
    return bytes(t for t in prompt if t < 256)


def send(qtbot, w, text: str) -> dict:
    w.composer.edit.setPlainText(text)
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy, timeout=30_000)
    return w.last_done


def test_a_preset_made_in_the_dialog_shapes_new_chats_and_can_be_changed_per_chat(qtbot, window, fakes, tmp_path):
    w, fake_script = window, fakes.script("m")
    dialog = w.presets.open_dialog()
    dialog.buttons["new"].click()
    dialog.name.setText("")
    dialog.prompt.setPlainText("Answer like a pirate.")
    dialog.buttons["save"].click()
    assert "name" in dialog.message.text() and dialog.prompt.toPlainText() == "Answer like a pirate."  # kept
    dialog.name.setText("Pirate")
    dialog.temperature.setValue(0.0)
    dialog.tier.setCurrentIndex(dialog.tier.findData("L1"))
    dialog.tools.setCurrentIndex(dialog.tools.findData(True))
    dialog.buttons["save"].click()
    dialog.buttons["default"].click()
    pirate = w.presets.store.default()
    assert pirate.name == "Pirate" and pirate.temperature == 0.0 and pirate.tools is True
    assert w.top_bar.preset.findText("Pirate") >= 0
    # a new chat starts from the default preset: its prompt, temperature, tier and tools
    fake_script.enqueue(Answer("Arr, hello."))
    done = send(qtbot, w, "Hello")
    fake = fakes.backend("m")
    assert b"Answer like a pirate." in text_of(fake.prompts[-1])
    assert fake.samplings[-1].temperature == 0.0 and done.level == "L1"
    assert w.tools_toggle.isChecked() and Settings.shared().get("tools.enabled") is False  # the chat's, not the app's
    assert w.top_bar.preset.currentText() == "Pirate"
    first = w.conversation_id
    # the picker: Default for this chat from now on (the window's temperature, no pirate)
    w.top_bar.preset.setCurrentIndex(w.top_bar.preset.findData("default"))
    w.top_bar.preset.activated.emit(w.top_bar.preset.currentIndex())
    fake_script.enqueue(Answer("Hello again."))
    send(qtbot, w, "Again")
    assert b"pirate" not in text_of(fake.prompts[-1]) and fake.samplings[-1].temperature == 0.3
    # another chat, then back: the picker shows each chat's own preset
    w.new_chat()
    qtbot.waitUntil(lambda: w.conversation_id not in (None, first), timeout=10_000)
    assert w.top_bar.preset.currentText() == "Pirate"  # new chats: the default preset
    w._select(first)
    qtbot.waitUntil(lambda: w.top_bar.preset.currentText() == "Default", timeout=10_000)
    # export, delete, import: the preset comes back (a copy with its own id)
    path = tmp_path / "presets.json"
    dialog.export_file(str(path))
    dialog.reload(pirate.id)
    dialog.buttons["delete"].click()
    assert all(p.name != "Pirate" for p in w.presets.store.all())
    dialog.import_file(str(path))
    assert "Added: Pirate" in dialog.message.text()
    assert any(p.name == "Pirate" and p.id != pirate.id for p in w.presets.store.all())
    dialog.close()


def test_screenshots_of_presets(qtbot, fakes, make_assistant, tmp_path):
    from .helpers import in_language, save_screenshot, screenshot_dir

    out = screenshot_dir(tmp_path)
    Settings.shared().set("ui.welcome_done", True)
    model = str(fakes.model_file("m"))
    from app.theme import apply_theme

    for language, theme in (("en", "light"), ("en", "dark"), ("zh_CN", "light"), ("zh_CN", "dark")):
        with in_language(language):
            apply_theme(theme)
            w = fake_window(qtbot, lambda: make_assistant(model), temperature=0.3)
            dialog = w.presets.open_dialog()
            name = "Translator" if language == "en" else "翻译"
            if not any(p.name == name for p in w.presets.store.all()):
                dialog.buttons["new"].click()
                dialog.name.setText(name)
                dialog.prompt.setPlainText("Translate what the user writes between English and Chinese. Keep the "
                                           "tone; say nothing else." if language == "en" else
                                           "把用户写的内容在中文和英文之间互译。保持语气，不要多说别的。")
                dialog.temperature.setValue(0.2)
                dialog.tier.setCurrentIndex(dialog.tier.findData("L2"))
                dialog.documents.setCurrentIndex(dialog.documents.findData(False))
                dialog.buttons["save"].click()
            dialog.reload(next(p.id for p in w.presets.store.all() if p.name == name))
            save_screenshot(qtbot, dialog, out / f"presets-{language}-{theme}.png", 760, 460)
            dialog.close()
            w.close()
            apply_theme("light")
