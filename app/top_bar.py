"""The bar above the conversation: the chat's title, which model answered it and the picker of
which will (Auto or a tier), its preset (and the door to the presets), and the
resources: a compact strip ("RAM 301 MiB · context 71 %") while the gauge panel is folded away,
the panel itself when the user opens it (setting ui.resources_panel, kept)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QToolButton, QWidget

from app.a11y import describe
from app.i18n import tr
from app.theme import set_tone


class TopBar(QWidget):
    sig_resources = Signal(bool)  # the gauge panel shown (True) or folded (False)
    sig_preset = Signal(str)      # the user chose a preset for this chat (its id)
    sig_edit_presets = Signal()

    def __init__(self, resources_open: bool, parent=None):
        super().__init__(parent)
        self.setObjectName("topBar")
        self.title = QLabel(tr("New chat"))
        self.title.setObjectName("chatTitle")
        self.title.setStyleSheet("font-weight:600;font-size:12pt")
        self.title.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.model = QLabel("")
        self.model.setObjectName("answeringModel")
        set_tone(self.model, "muted")
        self.preset = describe(QComboBox(), tr("Preset"), tr("The preset this chat uses: its system prompt, "
                                                              "temperature, tier, documents and tools"))
        self.preset.setObjectName("presetPicker")
        self.preset.activated.connect(lambda k: self.sig_preset.emit(self.preset.itemData(k)))
        self.presets_button = describe(QToolButton(), tr("Presets…"), tr("Make, change, import and export presets"))
        self.presets_button.setObjectName("presetsButton")
        self.presets_button.setText(tr("Presets…"))
        self.presets_button.clicked.connect(self.sig_edit_presets.emit)
        self.strip = QLabel("")
        self.strip.setObjectName("resourceStrip")
        set_tone(self.strip, "muted")
        self.toggle = QToolButton()
        self.toggle.setObjectName("resourcesToggle")
        self.toggle.setText(tr("Resources"))
        self.toggle.setCheckable(True)
        self.toggle.setChecked(resources_open)
        describe(self.toggle, tr("Resources"), tr("Show or fold the VRAM, RAM, KV and context gauges"))
        self.toggle.toggled.connect(self._toggled)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.model)
        layout.addStretch(1)
        layout.addWidget(self.preset)
        layout.addWidget(self.presets_button)
        layout.addWidget(self.strip)
        layout.addWidget(self.toggle)
        self.strip.setVisible(not resources_open)

    def add_picker(self, picker: QComboBox) -> None:
        """The model picker (the composer's route: Auto, or a tier and its model) after the model
        that answered last, where the eye looks for which model will answer."""
        self.layout().insertWidget(self.layout().indexOf(self.model) + 1, picker)

    def set_presets(self, presets: list[tuple[str, str]], current: str) -> None:
        """(id, name) of every preset, and the one this chat uses."""
        self.preset.blockSignals(True)
        self.preset.clear()
        for pid, name in presets:
            self.preset.addItem(name, pid)
        self.preset.setCurrentIndex(max(0, self.preset.findData(current)))
        self.preset.blockSignals(False)

    def set_title(self, title: str | None) -> None:
        self.title.setText(title or tr("New chat"))

    def set_model(self, level: str | None = None, model: str | None = None) -> None:
        """Which tier and model answered ("L1 · demo-small"); nothing for a chat with no answer yet."""
        self.model.setText(" · ".join(str(x) for x in (level, model) if x))

    def set_summary(self, text: str) -> None:
        self.strip.setText(text)

    def _toggled(self, on: bool) -> None:
        self.strip.setVisible(not on)
        self.sig_resources.emit(on)
