"""Settings, persisted in the data dir's settings.json (engine/config/settings.py): VRAM budget with a
live planner preview, models per tier, the optional L3 endpoint, routing, cascade, memory, KV
budgets, summary interval, reasoning (app/reasoning_settings.py), speculative decoding
(app/speculative_settings.py), theme and language, and the local API server (app/api_server_settings.py).
Changes that need a restart of the engine say so."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QFrame,
                               QGroupBox, QHBoxLayout, QLabel, QLineEdit, QListWidget, QMessageBox, QPushButton,
                               QScrollArea, QSlider, QSpinBox, QStackedWidget, QVBoxLayout)

from app.a11y import describe
from app.api_server_settings import ApiServerSection
from app.i18n import tr
from app.model_parts import entry_label
from app.reasoning_settings import ReasoningSettings
from app.speculative_settings import SpeculativeSettings
from app.updates import UpdateSettings
from engine.api import PlanError, RemoteError, Settings, check_remote, device_snapshot, load_catalog, plan

log = logging.getLogger(__name__)


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent=None, server_status: str = ""):
        super().__init__(parent)
        self.setWindowTitle(tr("Settings"))
        self.setObjectName("settingsDialog")
        self.settings = settings
        self.forget_requested = False
        self.reasoning = ReasoningSettings(self.settings)
        self.speculative = SpeculativeSettings(self.settings)
        self.api_server = ApiServerSection(settings, server_status)  # "Local API server"
        self.updates = UpdateSettings(settings)  # "Updates": the opt-in check (app/updates.py)
        self._sections([self._models_box(), self._l3_box(), self._behaviour_box(), self.reasoning, self.speculative,
                        self._appearance_box(), self.api_server, self.updates])
        self._update_preview()

    def _sections(self, boxes: list[QGroupBox]) -> None:
        """One section at a time, chosen on the left (each scrolls on its own when taller than the
        dialog), Save and Cancel below: one long scroll of every section hid most of them."""
        buttons = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        self.sections = QListWidget()
        self.sections.setObjectName("settingsSections")
        describe(self.sections, tr("Sections"), tr("Choose which settings to show"))
        self.pages = QStackedWidget()
        self.pages.setObjectName("settingsPages")
        for box in boxes:
            self.sections.addItem(box.title())
            scroll = QScrollArea()
            scroll.setWidgetResizable(True)
            scroll.setFrameShape(QFrame.NoFrame)
            scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
            scroll.setWidget(box)
            self.pages.addWidget(scroll)
        self.sections.currentRowChanged.connect(self.pages.setCurrentIndex)
        self.sections.setCurrentRow(0)
        self.sections.setFixedWidth(max(180, self.sections.sizeHintForColumn(0) + 24))
        row = QHBoxLayout()
        row.addWidget(self.sections)
        row.addWidget(self.pages, 1)
        outer = QVBoxLayout(self)
        outer.addLayout(row, 1)
        outer.addWidget(buttons)
        widest = max(box.sizeHint().width() for box in boxes)
        tallest = max(box.sizeHint().height() for box in boxes)
        screen = self.screen().availableGeometry().height() if self.screen() else 900
        self.resize(self.sections.width() + widest + 60, min(tallest + 80, int(screen * 0.9)))

    def _models_box(self) -> QGroupBox:
        """Models per tier, the GPU and the VRAM budget with what it buys."""
        box = QGroupBox(tr("Models and memory"))
        form = QFormLayout(box)
        catalog = load_catalog()
        self.l1, self.l2 = QComboBox(), QComboBox()
        for combo, tier, key in ((self.l1, "L1", "tier.L1"), (self.l2, "L2", "tier.L2")):
            for e in catalog.entries:
                if catalog.draft_only(e):  # a draft model helps its target and is never a tier of its own
                    continue
                label = entry_label(e) + ("" if e.present() else tr(" (not downloaded)"))
                combo.addItem(label, e.id)
            current = self.settings.get(key)
            if combo.findData(current) < 0:  # an imported file or a hub download: keep it, don't swap it for row 0
                combo.addItem(current, current)
            combo.setCurrentIndex(combo.findData(current))
        form.addRow(tr("CPU model (L1)"), self.l1)
        form.addRow(tr("GPU model (L2)"), self.l2)
        snap = device_snapshot()
        self._gpu_rows(form, snap)
        self._threads_row(form, snap.cpu_logical)
        return box

    def _threads_row(self, form: QFormLayout, cpus: int) -> None:
        """runtime.n_threads: 0 = automatic (each model's calibrated best, fewer while other programs
        are busy: engine/inference/thread_policy.py), N = N threads for every model. The engine reads
        it when it starts (LoadParams), so the row says "after a restart"."""
        self.n_threads = QSpinBox()
        self.n_threads.setObjectName("cpuThreads")
        current = int(self.settings.get("runtime.n_threads"))
        self.n_threads.setRange(0, max(cpus, current, 1))
        self.n_threads.setSpecialValueText(tr("Automatic"))
        self.n_threads.setValue(current)
        label = tr("CPU threads (after a restart)")
        why = tr("Automatic: measured once per model on this computer; fewer while other programs are busy.")
        describe(self.n_threads, label, why + " " + tr("A number fixes the count for every model."))
        form.addRow(label, self.n_threads)

    def _gpu_rows(self, form: QFormLayout, snap) -> None:
        """The GPU the L2 model loads on, and the VRAM budget slider with the planner's preview."""
        # Which GPU the GPU tier loads on: automatic (a real GPU, discrete first), none, or one by name;
        # a software Vulkan device (lavapipe) is listed only for testing and never chosen automatically.
        self.gpu_device = QComboBox()
        self.gpu_device.setObjectName("gpuDeviceChoice")
        self.gpu_device.addItem(tr("Automatic"), "auto")
        self.gpu_device.addItem(tr("None (CPU only)"), "none")
        for g in snap.gpus:
            if g.device:
                self.gpu_device.addItem(f"{g.name} — {g.backend} {g.device}"
                                        + (tr(" (software)") if g.software else ""), g.device)
        self.gpu_device.setCurrentIndex(max(0, self.gpu_device.findData(self.settings.get("runtime.gpu_device"))))
        form.addRow(tr("GPU (after a restart)"), self.gpu_device)
        gpu = snap.gpu(self.settings.get("runtime.gpu_device"))
        total_mb = int(gpu.total_bytes / 2**20) if gpu else 0
        self.vram = QSlider(Qt.Horizontal)
        self.vram.setRange(0, max(total_mb, 0))
        budget = self.settings.get("runtime.vram_budget_mb")
        self.vram.setValue(int(budget) if budget >= 0 else int(total_mb * 0.9))
        self.vram_label = QLabel()
        self.vram_label.setWordWrap(True)
        if not gpu:
            self.vram.setEnabled(False)
            self.vram_label.setText(tr("No GPU found: models run on the CPU ({why})").format(
                why=snap.note or tr("no GPU device")))
        self.preview = QLabel()
        self.preview.setWordWrap(True)
        self.vram.setObjectName("vramBudgetSlider")
        self.preview.setObjectName("vramBudgetPreview")
        row = QHBoxLayout()
        row.addWidget(self.vram, 1)
        row.addWidget(self.vram_label)
        form.addRow(tr("VRAM budget"), row)
        form.addRow(tr("What it buys for L2"), self.preview)
        self.vram.valueChanged.connect(self._update_preview)
        self.l2.currentIndexChanged.connect(self._update_preview)

    def _l3_box(self) -> QGroupBox:
        box = QGroupBox(tr("Big model on another machine (L3, optional)"))
        form = QFormLayout(box)
        self.l3_url = QLineEdit(self.settings.get("l3.base_url"))
        self.l3_url.setPlaceholderText("http://192.168.1.20:8000/v1")
        self.l3_key = QLineEdit(self.settings.get("l3.api_key"))
        self.l3_key.setEchoMode(QLineEdit.Password)
        self.l3_model = QLineEdit(self.settings.get("l3.model"))
        self.l3_timeout = QSpinBox()
        self.l3_timeout.setRange(5, 600)
        self.l3_timeout.setSuffix(" s")
        self.l3_timeout.setValue(int(self.settings.get("l3.timeout_s")))
        self.l3_test = QPushButton(tr("Test connection"))
        self.l3_result = QLabel()
        self.l3_test.clicked.connect(self._test_l3)
        form.addRow(tr("Base URL"), self.l3_url)
        form.addRow(tr("API key"), self.l3_key)
        form.addRow(tr("Model name"), self.l3_model)
        form.addRow(tr("Give up after (no answer)"), self.l3_timeout)
        form.addRow(self.l3_test, self.l3_result)
        self.docs_remote = QCheckBox(tr("Send document excerpts to the remote model (L3)"))
        self.docs_remote.setObjectName("docsAllowRemote")
        self.docs_remote.setToolTip(tr("Off: a question answered from your documents stays on this computer."))
        self.docs_remote.setChecked(self.settings.get("docs.allow_remote"))
        form.addRow(self.docs_remote)
        self.l3_images = QCheckBox(tr("Its model reads images: send images to it"))
        self.l3_images.setObjectName("l3Images")
        self.l3_images.setToolTip(tr("On: a message with images may go to L3, its images sent to the endpoint. "
                                     "Off: image turns stay on a local model that reads them."))
        self.l3_images.setChecked(self.settings.get("l3.images"))
        form.addRow(self.l3_images)
        return box

    def _behaviour_box(self) -> QGroupBox:
        box = QGroupBox(tr("Behaviour"))
        form = QFormLayout(box)
        self.route = QComboBox()
        for value, label in (("auto", tr("Automatic")), ("L1", "L1"), ("L2", "L2"), ("L3", "L3")):
            self.route.addItem(label, value)
        self.route.setCurrentIndex(max(0, self.route.findData(self.settings.get("router.mode"))))
        self.cascade = QCheckBox(tr("Re-ask unsure small-model answers on L2"))
        self.cascade.setChecked(self.settings.get("cascade.enabled"))
        self.threshold = QDoubleSpinBox()
        self.threshold.setRange(0.0, 1.0)
        self.threshold.setSingleStep(0.01)
        self.threshold.setValue(self.settings.get("cascade.threshold"))
        self.threshold.setSpecialValueText(tr("calibrated per model"))
        self.warn = QDoubleSpinBox()
        self.warn.setRange(0.0, 1.0)
        self.warn.setSingleStep(0.01)
        self.warn.setValue(self.settings.get("confidence.warn_threshold"))
        self.warn.setSpecialValueText(tr("calibrated per model"))
        self.summary = QSpinBox()
        self.summary.setRange(0, 100)
        self.summary.setValue(self.settings.get("summary.every_turns"))
        self.summary.setSpecialValueText(tr("off"))
        self.repetition_guard = QCheckBox(tr("Stop an answer that starts repeating itself"))
        self.repetition_guard.setObjectName("repetitionGuard")
        self.repetition_guard.setChecked(self.settings.get("generate.repetition_guard"))
        self.base_models = QCheckBox(tr("Let automatic routing use base (not instruction-tuned) models"))
        self.base_models.setObjectName("baseModels")
        self.base_models.setChecked(self.settings.get("router.base_models"))
        self.memory = QCheckBox(tr("Remember across conversations"))
        self.memory.setChecked(self.settings.get("memory.enabled"))
        self.forget_all = QPushButton(tr("Forget everything…"))
        self.forget_all.clicked.connect(self._forget_all)
        self.warm = QSpinBox()
        self.warm.setRange(0, 65_536)
        self.warm.setSuffix(" MB")
        self.warm.setSpecialValueText(tr("automatic (10 % of RAM, ≤ 1 GB)"))
        self.warm.setValue(int(self.settings.get("kv.warm_budget_mb")))
        self.cold = QSpinBox()
        self.cold.setRange(0, 1_000_000)
        self.cold.setSuffix(" MB")
        self.cold.setValue(int(self.settings.get("kv.cold_budget_mb")))
        form.addRow(tr("Routing"), self.route)
        form.addRow(self.cascade)
        form.addRow(self.repetition_guard)
        form.addRow(self.base_models)
        form.addRow(tr("Cascade threshold"), self.threshold)
        form.addRow(tr("Warn below confidence"), self.warn)
        form.addRow(tr("Summarise every N turns"), self.summary)
        form.addRow(self.memory, self.forget_all)
        form.addRow(tr("Parked chats in RAM"), self.warm)
        form.addRow(tr("Parked chats on disk"), self.cold)
        return box

    def _appearance_box(self) -> QGroupBox:
        box = QGroupBox(tr("Appearance"))
        form = QFormLayout(box)
        self.theme = QComboBox()
        self.theme.addItem(tr("Follow the system"), "system")
        self.theme.addItem(tr("Light"), "light")
        self.theme.addItem(tr("Dark"), "dark")
        self.theme.setCurrentIndex(max(0, self.theme.findData(self.settings.get("ui.theme"))))
        self.language = QComboBox()
        for value, label in (("auto", tr("System")), ("zh_CN", "简体中文"), ("en", "English")):
            self.language.addItem(label, value)
        self.language.setCurrentIndex(max(0, self.language.findData(self.settings.get("ui.language"))))
        form.addRow(tr("Theme"), self.theme)
        form.addRow(tr("Language (after a restart)"), self.language)
        return box

    def _update_preview(self) -> None:
        mb = self.vram.value()
        if self.vram.isEnabled():
            self.vram_label.setText(f"{mb} MB")
        try:
            p = plan(self.l2.currentData(), mb if self.vram.isEnabled() else 0, 4096)
        except (PlanError, OSError, ValueError) as exc:
            self.preview.setText(str(exc))
            return
        fits = tr("fits on the GPU") if p.fits else (tr("partly on the GPU") if p.offload == "partial"
                                                       else tr("runs on the CPU"))
        self.preview.setText(tr("{layers} of {total} layers on the GPU, context {ctx}, KV cache {kv} — {fits}").format(
            layers=max(p.n_gpu_layers - 1, 0) if p.n_gpu_layers else 0, total=p.n_layers, ctx=p.n_ctx,
            kv=p.type_k, fits=fits))

    def _test_l3(self) -> None:
        url = self.l3_url.text().strip()
        if not url:
            self.l3_result.setText(tr("no URL"))
            return
        try:
            models = check_remote(url, self.l3_key.text(), self.l3_model.text())
            self.l3_result.setText(tr("connected: {models}").format(models=", ".join(models[:3]) or "?"))
        except RemoteError as exc:
            self.l3_result.setText(str(exc))

    def _forget_all(self) -> None:
        if QMessageBox.question(self, tr("Forget everything"),
                                tr("Delete every memory and indexed message? Conversations stay.")) == QMessageBox.Yes:
            self.forget_requested = True

    def save(self) -> None:
        problem = self.api_server.problem()
        if problem:
            QMessageBox.warning(self, tr("Local API server"), problem)
            return
        s = self.settings
        s.set("tier.L1", self.l1.currentData())
        s.set("tier.L2", self.l2.currentData())
        if self.vram.isEnabled():
            s.set("runtime.vram_budget_mb", float(self.vram.value()))
        s.set("runtime.gpu_device", self.gpu_device.currentData())
        s.set("runtime.n_threads", int(self.n_threads.value()))
        s.set("l3.base_url", self.l3_url.text().strip())
        s.set("l3.api_key", self.l3_key.text())
        s.set("l3.model", self.l3_model.text().strip())
        s.set("l3.timeout_s", int(self.l3_timeout.value()))
        s.set("docs.allow_remote", self.docs_remote.isChecked())
        s.set("l3.images", self.l3_images.isChecked())
        s.set("router.mode", self.route.currentData())
        s.set("cascade.enabled", self.cascade.isChecked())
        s.set("generate.repetition_guard", self.repetition_guard.isChecked())
        s.set("router.base_models", self.base_models.isChecked())
        s.set("cascade.threshold", float(self.threshold.value()))
        s.set("confidence.warn_threshold", float(self.warn.value()))
        s.set("summary.every_turns", int(self.summary.value()))
        s.set("memory.enabled", self.memory.isChecked())
        s.set("kv.warm_budget_mb", float(self.warm.value()))
        s.set("kv.cold_budget_mb", float(self.cold.value()))
        s.set("ui.theme", self.theme.currentData())
        s.set("ui.language", self.language.currentData())
        self.reasoning.save(s)
        self.speculative.save(s)
        self.api_server.save(s)
        self.updates.save(s)
        self.accept()
