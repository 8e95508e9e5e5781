"""The Settings dialog's "Reasoning models" group: thinking on by default for new chats, its token
budget, quick requests answered at once, and what earlier answers' thinking becomes
(docs/reasoning.md). It reads and writes the reasoning.* settings only."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QGroupBox, QSpinBox

from app.i18n import tr


class ReasoningSettings(QGroupBox):
    def __init__(self, settings, parent=None):
        super().__init__(tr("Reasoning models"), parent)
        self.think = QCheckBox(tr("Think before answering (new chats)"))
        self.think.setObjectName("thinkDefault")
        self.think.setChecked(settings.get("reasoning.think"))
        self.quick = QCheckBox(tr("Answer quick requests on L1 without thinking"))
        self.quick.setObjectName("quickNoThink")
        self.quick.setChecked(settings.get("reasoning.quick_off"))
        self.budget = QSpinBox()
        self.budget.setObjectName("reasoningBudget")
        self.budget.setRange(0, 1_000_000)
        self.budget.setSingleStep(256)
        self.budget.setSuffix(tr(" tokens"))
        self.budget.setSpecialValueText(tr("up to ¾ of the answer's length"))
        self.budget.setValue(int(settings.get("reasoning.budget_tokens")))
        self.history = QComboBox()
        self.history.setObjectName("reasoningHistory")
        for value, label in (("template", tr("as the model was trained (its template)")),
                             ("drop", tr("leave it out")), ("keep", tr("keep it"))):
            self.history.addItem(label, value)
        self.history.setCurrentIndex(max(0, self.history.findData(settings.get("reasoning.history"))))
        form = QFormLayout(self)
        form.addRow(self.think)
        form.addRow(self.quick)
        form.addRow(tr("Thinking budget"), self.budget)
        form.addRow(tr("Earlier answers' thinking"), self.history)
        self.budget.setAccessibleName(tr("Thinking budget"))
        self.history.setAccessibleName(tr("Earlier answers' thinking"))

    def save(self, settings) -> None:
        settings.set("reasoning.think", self.think.isChecked())
        settings.set("reasoning.quick_off", self.quick.isChecked())
        settings.set("reasoning.budget_tokens", int(self.budget.value()))
        settings.set("reasoning.history", self.history.currentData())
