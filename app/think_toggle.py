"""The per-chat Think switch for reasoning models (Qwen3, the R1 distills): thinking on or off for
this chat's next answers. It starts from the reasoning.think setting; a new chat takes it as it
stands, and a chat keeps its own. Models that do not think ignore it. The window reads and stores
it through the engine."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QToolButton

from app.composer import chip
from app.i18n import tr


class ThinkToggle(QToolButton):
    sig_set = Signal(int, bool)  # conversation id, on: store it for that chat

    def __init__(self, default: bool, parent=None):
        super().__init__(parent)
        chip("thinkToggle", tr("Think"), "brain", button=self)  # a chip in the composer, as the other switches
        self.setToolTip(tr("Reasoning models think before they answer (shown folded above the answer). "
                           "Off: they answer at once."))
        self.setAccessibleName(tr("Think"))
        self.setAccessibleDescription(self.toolTip())
        self.default = default
        self.conversation_id: int | None = None
        self.setChecked(default)
        self.toggled.connect(self._toggled)

    def take(self, conversation_id: int) -> None:
        """A chat the window has just made takes the switch as it stands (stored when it is not
        the setting's default)."""
        self.conversation_id = conversation_id
        if self.isChecked() != self.default:
            self.sig_set.emit(conversation_id, self.isChecked())

    def show_state(self, conversation_id: int, on: bool | None) -> None:
        """The chat shown now and its stored switch (None: the setting's default)."""
        self.conversation_id = conversation_id
        self.blockSignals(True)
        self.setChecked(self.default if on is None else on)
        self.blockSignals(False)

    def _toggled(self, on: bool) -> None:
        if self.conversation_id is not None:
            self.sig_set.emit(self.conversation_id, on)
