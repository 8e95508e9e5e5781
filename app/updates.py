"""New versions, as the window tells them (issue 43): asked once, checked at most once a day, shown as a
bar above the chat. Nothing is downloaded or run: "Get it" opens this system's installer link in the
browser. A failed check shows nothing (the log has it).

`Updates` is a part the window owns; `UpdateSettings` is the Settings dialog's "Updates" section.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFormLayout, QFrame, QGroupBox, QHBoxLayout,
                               QLabel, QPushButton, QTextBrowser, QVBoxLayout, QWidget)

from app.a11y import describe
from app.background import Runner
from app.i18n import current_language, tr
from app.theme import set_tone
from engine.api import Settings, UpdateOffer, check_for_update, update_channel, update_due


class UpdateBar(QFrame):
    """One line above the chat: a question or news, with its buttons; hidden otherwise."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("updateBar")
        self.text = QLabel("")
        self.text.setWordWrap(True)
        set_tone(self.text, "info")
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addWidget(self.text, 1)
        self.buttons: list[QPushButton] = []
        self.hide()

    def say(self, text: str, buttons: list[tuple[str, str, object]], keep: tuple[str, ...] = ()) -> None:
        """Show `text` with (label, object name, action) buttons; each closes the bar but those named in `keep`."""
        for b in self.buttons:
            b.deleteLater()
        self.buttons = []
        self.text.setText(text)
        for label, name, action in buttons:
            button = QPushButton(label)
            button.setObjectName(name)
            closes = name not in keep
            button.clicked.connect(lambda _=False, act=action, closes=closes: (closes and self.hide(), act()))
            self.row.addWidget(button)
            self.buttons.append(button)
        self.show()


class Updates:
    """Asks once (after the first-start welcome), then checks when due on its own thread."""

    def __init__(self, parent: QWidget, bar: UpdateBar, settings: Settings | None = None):
        self.parent, self.bar = parent, bar
        self.settings = settings or Settings.shared()
        self.channel = update_channel()  # None in a build without one: nothing to ask or check
        self.offer: UpdateOffer | None = None
        self._runner: Runner | None = None  # made for the first check only
        self._checking = False  # the engine's ready twice (a restart) while a check runs: one check
        self.settings.on_change(self._changed)  # switched on in Settings: check now if due, not at the next start

    def start(self) -> None:
        """The window is up: ask, or check if due."""
        if self.channel is None or not self.settings.get("ui.welcome_done"):
            return
        if self.settings.get("updates.check") == "ask":
            self.bar.say(tr("Check for new versions once a day? The app reads one small signed file from {host}; "
                            "nothing is downloaded or installed by itself.").format(host=_host(self.channel.url)),
                         [(tr("Check once a day"), "updatesYes", lambda: self._answer("on")),
                          (tr("Don't check"), "updatesNo", lambda: self._answer("off"))])
        elif update_due(self.settings):
            self.check()

    def _changed(self, key: str, value) -> None:
        if key == "updates.check" and value == "on" and update_due(self.settings):
            self.check()

    def _answer(self, value: str) -> None:
        self.settings.set("updates.check", value)  # "on" checks through _changed

    def check(self) -> None:
        if self._checking or self.channel is None:
            return
        if self._runner is None:
            self._runner = Runner("updates")
        self._checking = True
        channel, language, settings = self.channel, current_language(), self.settings
        self._runner.run(lambda: check_for_update(settings, language, chan=channel), self._checked,
                         lambda _exc: setattr(self, "_checking", False))

    def _checked(self, outcome) -> None:
        self._checking = False
        if outcome.offer is None:
            return  # quiet: the log says why
        self.offer = offer = outcome.offer
        self.bar.say(tr("Version {version} is available.").format(version=offer.version),
                     [(tr("What's new"), "updatesNotes", lambda: self.show_notes(offer)),
                      (tr("Get it"), "updatesGet", lambda: QDesktopServices.openUrl(QUrl(offer.url))),
                      (tr("Later"), "updatesLater", lambda: None)], keep=("updatesNotes",))

    def show_notes(self, offer: UpdateOffer) -> QDialog:
        dialog = QDialog(self.parent)
        dialog.setObjectName("updateNotes")
        dialog.setWindowTitle(tr("Version {version}").format(version=offer.version))
        notes = QTextBrowser()
        notes.setMarkdown(offer.notes or tr("No release notes."))
        notes.setOpenExternalLinks(True)
        describe(notes, tr("Release notes"), tr("What is new in version {version}").format(version=offer.version))
        name = urlsplit(offer.url).path.rsplit("/", 1)[-1]
        link = QLabel(tr("The installer for this computer: <a href=\"{url}\">{name}</a> ({mb:.0f} MB). "
                         "Its SHA-256 is {sha}.").format(url=offer.url, name=name, mb=offer.size / 1e6,
                                                          sha=offer.sha256))
        link.setOpenExternalLinks(True)
        link.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(dialog.close)
        layout = QVBoxLayout(dialog)
        for part in (notes, link, buttons):
            layout.addWidget(part)
        dialog.resize(560, 420)
        dialog.show()
        return dialog

    def close(self) -> None:
        self.settings.remove_listener(self._changed)  # the shared settings outlive the window
        if self._runner is not None:
            self._runner.close()


class UpdateSettings(QGroupBox):
    """Settings' "Updates" section: the one switch, and what it does."""

    def __init__(self, settings: Settings, parent: QWidget | None = None):
        super().__init__(tr("Updates"), parent)
        self.setObjectName("updateSettings")
        self.was = settings.get("updates.check")
        channel = update_channel()
        self.enabled = QCheckBox(tr("Check for new versions once a day"))
        self.enabled.setObjectName("updatesCheck")
        self.enabled.setChecked(self.was == "on")
        if channel is None:
            explain = tr("This build cannot check for updates: it was built without a release channel "
                         "(from source, or without a signing key).")
            self.enabled.setEnabled(False)
        else:
            explain = tr("Reads one small signed file from {host} and tells you when a new version is out. "
                         "Nothing is downloaded or installed by itself.").format(host=_host(channel.url))
        describe(self.enabled, tr("Check for new versions once a day"), explain)
        self.explain = QLabel(explain)
        self.explain.setWordWrap(True)
        set_tone(self.explain, "muted")
        form = QFormLayout(self)
        form.addRow(self.enabled)
        form.addRow(self.explain)

    def save(self, settings: Settings) -> None:
        """Only a change is written: "not asked yet" stays so until the user chooses."""
        if self.enabled.isChecked() != (self.was == "on"):
            settings.set("updates.check", "on" if self.enabled.isChecked() else "off")


def _host(url: str) -> str:
    return urlsplit(url).hostname or url
