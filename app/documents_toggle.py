"""The per-chat "Use my documents" switch, and the note that says the documents stay on this
computer when a remote model (L3) is set up but may not read them (setting docs.allow_remote).

It holds no engine state: it asks for a chat's setting and sends changes as signals, and the
engine's answer comes back to `show_state`."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from app.composer import chip
from app.i18n import tr
from app.theme import set_tone
from engine.api import Settings


class DocumentsToggle(QWidget):
    sig_set = Signal(int, bool)  # conversation id, on: store it for that chat
    sig_query = Signal(int)      # conversation id: what is its setting?

    def __init__(self, parent=None):
        super().__init__(parent)
        self.check = chip("useDocuments", tr("Documents"), "library")
        self.check.setAccessibleName(tr("Use my documents"))
        self.check.setToolTip(tr("Answers in this chat use excerpts of your files (Documents) and cite them."))
        self.note = QLabel(tr("Documents stay on this computer: local models answer."))
        self.note.setObjectName("documentsLocalNote")
        set_tone(self.note, "hint")
        self.note.hide()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.check)
        layout.addWidget(self.note)
        self.conversation_id: int | None = None
        self.remote_kept_off = False  # L3 is set up and may not read documents
        self.check.toggled.connect(self._toggled)

    def set_conversation(self, conversation_id: int | None, new: bool = False) -> None:
        """The window shows another chat. A chat it has just made takes the switch as it stands;
        an existing one shows its own setting once the engine says it."""
        self.conversation_id = conversation_id
        if conversation_id is None:
            return
        if new:
            if self.check.isChecked():
                self.sig_set.emit(conversation_id, True)
        else:
            self.sig_query.emit(conversation_id)

    def show_state(self, conversation_id: int, on: bool) -> None:
        """The engine's answer (bound slot: queued from the engine thread)."""
        if conversation_id == self.conversation_id and self.check.isChecked() != on:
            self.check.blockSignals(True)
            self.check.setChecked(on)
            self.check.blockSignals(False)
        self._update_note()

    def set_remote_kept_off(self, kept_off: bool) -> None:
        self.remote_kept_off = kept_off
        self._update_note()

    def read_settings(self) -> None:
        """Documents stay local when L3 is set up without docs.allow_remote: the toggle says so."""
        settings = Settings.shared()
        self.set_remote_kept_off(bool(settings.get("l3.base_url")) and not settings.get("docs.allow_remote"))

    def _toggled(self, on: bool) -> None:
        if self.conversation_id is not None:
            self.sig_set.emit(self.conversation_id, on)
        self._update_note()

    def _update_note(self) -> None:
        self.note.setVisible(self.check.isChecked() and self.remote_kept_off)
