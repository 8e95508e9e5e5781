"""The Settings dialog's "Speculative decoding" group: how answers are decoded, the setting
speculative.mode (engine/config/settings.py). It applies live: the next answer decodes so."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel

from app.a11y import describe
from app.i18n import tr


class SpeculativeSettings(QGroupBox):
    def __init__(self, settings, parent=None):
        super().__init__(tr("Speculative decoding"), parent)
        self.setObjectName("speculativeSettings")
        explain = tr("Auto drafts tokens from the chat itself (and a draft model where one is paired) and turns "
                     "itself off where it would be slower.")
        self.mode = QComboBox()
        self.mode.setObjectName("speculativeMode")
        choices = (("auto", tr("Auto"), explain),
                   ("off", tr("Off"), tr("One token at a time.")),
                   ("ngram", tr("N-gram drafts (always)"),
                    tr("Drafts from the chat's own words (what an answer repeats: code, quotes, lists), "
                       "also where that is slower.")),
                   ("draft", tr("Draft model (always)"),
                    tr("A small model paired with the answering one drafts, also where that is slower.")))
        for value, label, tip in choices:
            self.mode.addItem(label, value)
            self.mode.setItemData(self.mode.count() - 1, tip, Qt.ToolTipRole)
        self.mode.setCurrentIndex(max(0, self.mode.findData(settings.get("speculative.mode"))))
        self.explain = QLabel(explain)
        self.explain.setObjectName("speculativeExplain")
        self.explain.setWordWrap(True)
        describe(self.mode, tr("Speculative decoding"), explain)
        form = QFormLayout(self)
        form.addRow(tr("Mode"), self.mode)
        form.addRow(self.explain)

    def save(self, settings) -> None:
        settings.set("speculative.mode", self.mode.currentData())
