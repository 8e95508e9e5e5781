"""The update check in the window (issue 43): asked once after the welcome, off until the user says
yes, news as a bar with the notes and this system's link, nothing opened or fetched by itself; the
Settings section's switch. Against the fake release server of tests/test_update_check.py."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QTextBrowser, QWidget

from app import updates as updates_module
from app.settings_dialog import SettingsDialog
from app.updates import UpdateBar, Updates, UpdateSettings
from engine.api import Settings
from engine.update.check import Channel, system_key
from engine.update.manifest import public_key_of, sign
from tests.fake_backend import fakes, make_assistant  # noqa: F401
from tests.test_update_check import KEY, ReleaseServer, manifest

from .helpers import fake_window, in_language, save_screenshot, screenshot_dir


def window_part(qtbot, settings, channel):
    parent = QWidget()
    qtbot.addWidget(parent)
    bar = UpdateBar(parent)
    part = Updates(parent, bar, settings)
    part.channel = channel
    return part, bar


def test_asked_once_then_news_with_notes_and_a_link_the_user_opens(qtbot, assistant_home, monkeypatch):
    server = ReleaseServer()
    server.body = sign(manifest("9.1.0", systems=(system_key(),)), KEY)
    opened = []
    monkeypatch.setattr(updates_module.QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    settings = Settings(assistant_home / "settings.json")
    part, bar = window_part(qtbot, settings, Channel(server.url, [public_key_of(KEY)]))
    try:
        part.start()  # before the first-start welcome is done: nothing asked yet
        assert bar.isHidden() and not server.requests
        settings.set("ui.welcome_done", True)
        part.start()
        assert not bar.isHidden() and "127.0.0.1" in bar.text.text() and "nothing is downloaded" in bar.text.text()
        assert not server.requests  # asking reads nothing
        [yes] = [b for b in bar.buttons if b.objectName() == "updatesYes"]
        yes.click()
        assert settings.get("updates.check") == "on"
        qtbot.waitUntil(lambda: part.offer is not None, timeout=20_000)
        assert "9.1.0" in bar.text.text() and len(server.requests) == 1 and not opened
        [notes] = [b for b in bar.buttons if b.objectName() == "updatesNotes"]
        notes.click()
        dialog = part.parent.findChild(QWidget, "updateNotes")
        assert dialog is not None and dialog.isVisible() and "What is new in 9.1.0" in dialog.findChild(
            QTextBrowser).toPlainText()
        dialog.close()
        assert not bar.isHidden()  # the notes keep the news up
        part.start()  # a restart of the engine: checked today, not read again
        [get] = [b for b in bar.buttons if b.objectName() == "updatesGet"]
        get.click()
        assert opened == [QUrl(f"https://example.org/{system_key()}/9.1.0")] and bar.isHidden()
        assert len(server.requests) == 1
    finally:
        part.close()
        server.close()


def test_no_means_no_and_a_build_without_a_channel_never_asks(qtbot, assistant_home):
    server = ReleaseServer()
    settings = Settings(assistant_home / "settings.json")
    settings.set("ui.welcome_done", True)
    part, bar = window_part(qtbot, settings, Channel(server.url, [public_key_of(KEY)]))
    try:
        part.start()
        [no] = [b for b in bar.buttons if b.objectName() == "updatesNo"]
        no.click()
        assert settings.get("updates.check") == "off" and bar.isHidden()
        part.start()
        assert bar.isHidden() and not server.requests and part._runner is None
    finally:
        part.close()
        server.close()
    settings.set("updates.check", "ask")
    bare, bar = window_part(qtbot, settings, None)  # a checkout: no update_channel.json
    bare.start()
    assert bar.isHidden()


def test_the_settings_switch_writes_only_a_change(qtbot, assistant_home, monkeypatch):
    settings = Settings(assistant_home / "settings.json")
    section = UpdateSettings(settings)  # this checkout has no channel: the switch is off and says why
    qtbot.addWidget(section)
    assert not section.enabled.isEnabled() and "cannot check" in section.explain.text()
    monkeypatch.setattr(updates_module, "update_channel", lambda: Channel("https://example.org/u.json", ["k"]))
    section = UpdateSettings(settings)
    qtbot.addWidget(section)
    assert section.enabled.isEnabled() and "example.org" in section.explain.text()
    section.save(settings)
    assert settings.get("updates.check") == "ask"  # saving Settings is not an answer
    section.enabled.setChecked(True)
    section.save(settings)
    assert settings.get("updates.check") == "on"
    assert section.enabled.accessibleName()


def test_screenshots_of_the_news_and_the_settings_section(qtbot, fakes, make_assistant, tmp_path, monkeypatch):
    """The window with a new version's bar over an empty chat, and Settings at "Updates", in both languages."""
    out = screenshot_dir(tmp_path)
    server = ReleaseServer()
    notes = {"en": "Answers start faster in long chats.", "zh_CN": "长对话中回答开始得更快。"}
    server.body = sign({**manifest("0.2.0", systems=(system_key(),)), "notes": notes}, KEY)
    channel = Channel(server.url, [public_key_of(KEY)])
    monkeypatch.setattr(updates_module, "update_channel", lambda: channel)
    Settings.shared().set("updates.check", "on")
    try:
        for language in ("en", "zh_CN"):
            with in_language(language):
                Settings.shared().set("updates.last_check", 0.0)
                w = fake_window(qtbot, lambda: make_assistant(str(fakes.model_file("m"))))
                qtbot.waitUntil(lambda w=w: w.updates.offer is not None, timeout=30_000)
                assert not w.update_bar.isHidden() and "0.2.0" in w.update_bar.text.text()
                save_screenshot(qtbot, w, out / f"update-available-{language}.png", 1100, 720)
                dialog = w.updates.show_notes(w.updates.offer)
                assert notes[language] in dialog.findChild(QTextBrowser).toPlainText()
                dialog.close()
                w.close()
                released = Channel("https://github.com/owner/offline-assistant/releases/latest/download/update.json",
                                   channel.public_keys)  # a release build's channel (release.yml)
                monkeypatch.setattr(updates_module, "update_channel", lambda: released)
                settings = SettingsDialog(Settings.shared())
                qtbot.addWidget(settings)
                settings.sections.setCurrentRow(settings.sections.count() - 1)
                assert settings.pages.currentWidget().findChild(UpdateSettings) is settings.updates
                save_screenshot(qtbot, settings, out / f"settings-updates-{language}.png", 760, 520)
                settings.close()
                monkeypatch.setattr(updates_module, "update_channel", lambda: channel)
    finally:
        server.close()


def test_switched_on_in_settings_it_checks_without_a_restart(qtbot, assistant_home):
    server = ReleaseServer()
    server.body = sign(manifest("9.2.0", systems=(system_key(),)), KEY)
    settings = Settings(assistant_home / "settings.json")
    settings.set("ui.welcome_done", True)
    settings.set("updates.check", "off")
    part, bar = window_part(qtbot, settings, Channel(server.url, [public_key_of(KEY)]))
    try:
        part.start()
        assert bar.isHidden() and not server.requests
        section = UpdateSettings(settings)
        qtbot.addWidget(section)
        section.enabled.setChecked(True)
        section.save(settings)
        qtbot.waitUntil(lambda: part.offer is not None, timeout=20_000)
        assert part.offer.version == "9.2.0" and len(server.requests) == 1
    finally:
        part.close()
        server.close()
