"""Presets ("assistants"): the list on the left, the chosen one's fields on the right (name, system
prompt, temperature, tier, documents, tools), New / Delete / Use for new chats, Import… and
Export… as JSON. The store is engine.api's `Presets` (presets.json); a field the engine refuses is
said under the form, and nothing the user typed is lost."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QDoubleSpinBox, QFileDialog, QFormLayout,
                               QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem, QPlainTextEdit,
                               QPushButton, QVBoxLayout)

from app.a11y import describe
from app.i18n import tr
from engine.api import Preset, PresetError, Presets

# Tri-state switches: (label, value) — None leaves the chat's own switch as it stands.
SWITCH = ((lambda: tr("as it stands"), None), (lambda: tr("on"), True), (lambda: tr("off"), False))


class PresetsDialog(QDialog):
    sig_changed = Signal()  # presets were saved, deleted, imported or the default changed

    def __init__(self, store: Presets, parent=None):
        super().__init__(parent)
        self.setObjectName("presetsDialog")
        self.setWindowTitle(tr("Presets"))
        self.store = store
        self.current: Preset | None = None
        self.list = QListWidget()
        self.list.setObjectName("presetList")
        describe(self.list, tr("Presets"), tr("Your presets; the starred one starts every new chat"))
        self.list.currentItemChanged.connect(lambda *_: self._show(self._chosen()))
        self.name = describe(QLineEdit(), tr("Name"), tr("What the preset is called"))
        self.name.setObjectName("presetName")
        self.prompt = describe(QPlainTextEdit(), tr("System prompt"), tr("What the model is told before every chat "
                                                                         "with this preset"))
        self.prompt.setObjectName("presetPrompt")
        self.temperature = describe(QDoubleSpinBox(), tr("Temperature"), tr("0 answers the same way every time; "
                                                                            "higher is more varied"))
        self.temperature.setObjectName("presetTemperature")
        self.temperature.setRange(-0.1, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setSpecialValueText(tr("the app's"))  # -0.1: None
        self.tier = describe(QComboBox(), tr("Tier"), tr("Which tier answers its chats"))
        self.tier.setObjectName("presetTier")
        for label, value in ((tr("Auto"), "auto"), ("L1", "L1"), ("L2", "L2"), ("L3", "L3")):
            self.tier.addItem(label, value)
        self.documents = self._switch("presetDocuments", tr("Use my documents"),
                                      tr("Whether its chats answer from your documents"))
        self.tools = self._switch("presetTools", tr("Tools"), tr("Whether the model may call tools in its chats"))
        form = QFormLayout()
        form.addRow(tr("Name"), self.name)
        form.addRow(tr("System prompt"), self.prompt)
        form.addRow(tr("Temperature"), self.temperature)
        form.addRow(tr("Tier"), self.tier)
        form.addRow(tr("Use my documents"), self.documents)
        form.addRow(tr("Tools"), self.tools)
        self.message = QLabel("")
        self.message.setObjectName("presetMessage")
        self.message.setWordWrap(True)
        self.buttons = {}
        row = QHBoxLayout()
        for key, label, what, act in (
            ("new", tr("New"), tr("A new preset"), self.new),
            ("save", tr("Save"), tr("Keep the changes to this preset"), self.save),
            ("delete", tr("Delete"), tr("Delete this preset (chats that had it use the default)"), self.delete),
            ("default", tr("Use for new chats"), tr("Every new chat starts from this preset"), self.make_default),
            ("import", tr("Import…"), tr("Add presets from a JSON file"), self.import_file),
            ("export", tr("Export…"), tr("Save every preset to a JSON file"), self.export_file),
        ):
            button = describe(QPushButton(label), label, what)
            button.setObjectName(f"preset_{key}")
            button.clicked.connect(act)
            row.addWidget(button)
            self.buttons[key] = button
        left = QVBoxLayout()
        left.addWidget(self.list)
        right = QVBoxLayout()
        right.addLayout(form)
        right.addWidget(self.message)
        top = QHBoxLayout()
        top.addLayout(left, 1)
        top.addLayout(right, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(row)
        self.resize(760, 460)
        self.reload()

    def _switch(self, name: str, label: str, what: str) -> QComboBox:
        box = describe(QComboBox(), label, what)
        box.setObjectName(name)
        for text, value in SWITCH:
            box.addItem(text(), value)
        return box

    # ---- the list
    def reload(self, select: str | None = None) -> None:
        keep = select or (self.current.id if self.current else None)
        default = self.store.default().id
        self.list.blockSignals(True)
        self.list.clear()
        for p in self.store.all():
            item = QListWidgetItem(("★ " if p.id == default else "") + shown_name(p))
            item.setData(Qt.UserRole, p.id)
            self.list.addItem(item)
            if p.id == keep:
                self.list.setCurrentItem(item)
        if self.list.currentItem() is None and self.list.count():
            self.list.setCurrentRow(0)
        self.list.blockSignals(False)
        if self.store.problem:  # presets.json unreadable: said (an action's own message stays otherwise)
            self.message.setText(self.store.problem)
        self._show(self._chosen())

    def _chosen(self) -> Preset | None:
        item = self.list.currentItem()
        return self.store.get(item.data(Qt.UserRole)) if item is not None else None

    def _show(self, preset: Preset | None) -> None:
        self.current = preset
        if preset is None:
            return
        self.name.setText(preset.name)
        self.prompt.setPlainText(preset.system_prompt)
        self.temperature.setValue(-0.1 if preset.temperature is None else preset.temperature)
        self.tier.setCurrentIndex(max(0, self.tier.findData(preset.tier)))
        for box, value in ((self.documents, preset.documents), (self.tools, preset.tools)):
            box.setCurrentIndex(next(k for k, (_, v) in enumerate(SWITCH) if v is value))
        self.buttons["delete"].setEnabled(preset.id != "default")

    def edited(self) -> Preset:
        """The form as a preset (the one shown, changed)."""
        t = self.temperature.value()
        return Preset(self.current.id if self.current else "", self.name.text(), self.prompt.toPlainText(),
                      None if t < 0 else round(t, 2), self.tier.currentData(), self.documents.currentData(),
                      self.tools.currentData())

    # ---- actions
    def save(self) -> bool:
        try:
            saved = self.store.save(self.edited())
        except PresetError as exc:
            self.message.setText(str(exc))  # the form keeps what was typed
            return False
        self.message.setText(tr("Saved “{name}”").format(name=saved.name))
        self.reload(saved.id)
        self.sig_changed.emit()
        return True

    def new(self) -> None:
        preset = self.store.create(tr("New preset"))
        self.reload(preset.id)
        self.name.setFocus()
        self.name.selectAll()
        self.sig_changed.emit()

    def delete(self) -> None:
        if self.current is None:
            return
        try:
            self.store.delete(self.current.id)
        except PresetError as exc:
            self.message.setText(str(exc))
            return
        self.current = None
        self.reload()
        self.sig_changed.emit()

    def make_default(self) -> None:
        if self.current is not None:
            self.store.set_default(self.current.id)
            self.reload(self.current.id)
            self.sig_changed.emit()

    def import_file(self, path: str | None = None) -> None:
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, tr("Import presets"), str(Path.home()), "JSON (*.json)")
            if not path:
                return
        try:
            text = Path(path).read_text(encoding="utf-8")
            added, problems = self.store.import_json(text)
        except (OSError, UnicodeDecodeError, PresetError) as exc:
            self.message.setText(tr("Not imported: {why}").format(why=exc))
            return
        self.message.setText("\n".join([tr("Added: {names}").format(names=", ".join(added))] * bool(added) + problems)
                             or tr("Nothing to import"))
        self.reload()
        self.sig_changed.emit()

    def export_file(self, path: str | None = None) -> None:
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, tr("Export presets"), str(Path.home() / "presets.json"),
                                                  "JSON (*.json)")
            if not path:
                return
        try:
            Path(path).write_text(self.store.export_json(), encoding="utf-8")
        except OSError as exc:
            self.message.setText(tr("Not exported: {why}").format(why=exc.strerror or exc))
            return
        self.message.setText(tr("Exported to {path}").format(path=path))


def shown_name(preset: Preset) -> str:
    """The built-in preset's name in the window's language, until the user renames it."""
    return tr("Default") if preset.id == "default" and preset.name == "Default" else preset.name
