"""The welcome on first start: this machine (CPU, RAM, GPUs and their free memory), an L1/L2 pair
that fits it (`engine.api.recommend_models`), the hub to download from, and two ways on: "Download
and use" (both files, and the draft model the catalog pairs with either, one after the other, with
progress and Cancel, then the tiers switch) or "Try the demo models". It takes the empty chat's
place until dismissed, and never comes back once it was dismissed or real models exist. The machine
check and the downloads are `Task`s on its Runner (app/background.py)."""

from __future__ import annotations

import json
import logging

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QFrame, QGroupBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QTableWidget,
                               QTableWidgetItem, QVBoxLayout)

from app.a11y import describe
from app.background import Runner
from app.i18n import tr
from app.model_parts import Task, companions, draft_size, hub_combo, pair_label
from engine.api import Settings, download, load_catalog, recommend_models

log = logging.getLogger(__name__)
GB = 10**9


def welcome_needed(settings: Settings, model_override: str | None = None) -> bool:
    """True on a first start: not dismissed, no real (non-demo) catalog model downloaded, both tiers
    on demo models, and no model given on the command line."""
    if model_override or settings.get("ui.welcome_done"):
        return False
    catalog = load_catalog()
    if any(not e.demo and e.present() for e in catalog.entries):
        return False
    tiers = [catalog.get(settings.get(key)) for key in ("tier.L1", "tier.L2")]
    return all(e is not None and e.demo for e in tiers)


def _speed_text(speed: str, tok_s: float) -> str:
    label = {"fast": tr("fast"), "usable": tr("usable"), "slow": tr("slow")}.get(speed, speed)
    return tr("{speed} (~{n} tokens/s)").format(speed=label, n=f"{tok_s:.0f}")


class WelcomePanel(QFrame):
    """objectName welcomePanel; children tests find: machineFacts, recommendedModels, hubEndpoint,
    downloadAndUse, cancelDownload, tryDemo, welcomeMessage."""

    sig_tiers_changed = Signal(str)  # JSON list of the tier keys set: the window applies them live
    sig_dismissed = Signal()

    def __init__(self, settings: Settings, parent=None):
        super().__init__(parent)
        self.setObjectName("welcomePanel")
        self.setFrameShape(QFrame.StyledPanel)
        self.settings = settings
        self.recommendation = None
        self.task: Task | None = None
        self.runner = Runner("welcome", self)  # the machine check, then the downloads
        self.queue: list = []  # entries left to download
        self.queued = 0  # how many the download started with
        self.picks: list = []
        self.catalog = load_catalog()  # the draft models paired with the picks

        title = QLabel(tr("Welcome"))
        title.setStyleSheet("font-size:20px;font-weight:600")
        intro = QLabel(tr("Everything runs on this computer. You start with two tiny demo models, which show how "
                          "the app works but answer poorly; here is a real pair that fits this machine."))
        intro.setWordWrap(True)
        self.hub = describe(hub_combo(settings), tr("Download from"), tr(
            "The hub the models are downloaded from (a mirror where the main hub is slow or blocked)"))
        hub_row = QHBoxLayout()
        hub_row.addWidget(QLabel(tr("Download from:")))
        hub_row.addWidget(self.hub, 1)
        self.bar = QProgressBar()
        self.bar.setObjectName("welcomeProgress")
        self.bar.hide()
        self.message = QLabel("")
        self.message.setObjectName("welcomeMessage")
        self.message.setWordWrap(True)
        layout = QVBoxLayout(self)
        for part in (title, intro, self._facts_box(), self._recommended_box(), hub_row, self._buttons(), self.bar,
                     self.message):
            if isinstance(part, QHBoxLayout):
                layout.addLayout(part)
            else:
                layout.addWidget(part)
        layout.addStretch(1)
        self._start(Task(lambda _t: recommend_models(gpu_device=settings.get("runtime.gpu_device")),
                         self._on_checked))

    def _facts_box(self) -> QGroupBox:
        box = QGroupBox(tr("This machine"))
        self.facts = QLabel(tr("Checking this machine…"))
        self.facts.setObjectName("machineFacts")
        self.facts.setWordWrap(True)
        self.facts.setTextInteractionFlags(Qt.TextSelectableByMouse)
        QVBoxLayout(box).addWidget(self.facts)
        return box

    def _recommended_box(self) -> QGroupBox:
        box = QGroupBox(tr("Recommended models"))
        self.models = QTableWidget(0, 5)
        describe(self.models, tr("Recommended models"), tr("The models that fit this computer, with their size and "
                                                           "what each is for"))
        self.models.setObjectName("recommendedModels")
        self.models.setHorizontalHeaderLabels([tr("Tier"), tr("Model"), tr("Download size"), tr("Needs"),
                                               tr("Expected speed")])
        self.models.verticalHeader().hide()
        self.models.setEditTriggers(QTableWidget.NoEditTriggers)
        self.models.setSelectionMode(QTableWidget.NoSelection)
        self.models.setFocusPolicy(Qt.NoFocus)
        self.models.horizontalHeader().setStretchLastSection(True)
        self.why = QLabel("")
        self.why.setWordWrap(True)
        layout = QVBoxLayout(box)
        layout.addWidget(self.models)
        layout.addWidget(self.why)
        return box

    def _buttons(self) -> QHBoxLayout:
        self.download_button = QPushButton(tr("Download and use"))
        self.download_button.setObjectName("downloadAndUse")
        self.download_button.setEnabled(False)  # until the recommendation is there
        self.download_button.setDefault(True)
        self.demo_button = QPushButton(tr("Try the demo models"))
        self.demo_button.setObjectName("tryDemo")
        self.cancel_button = QPushButton(tr("Cancel"))
        self.cancel_button.setObjectName("cancelDownload")
        self.cancel_button.hide()
        self.download_button.clicked.connect(self.download_and_use)
        self.demo_button.clicked.connect(self.try_demo)
        self.cancel_button.clicked.connect(self.cancel)
        buttons = QHBoxLayout()
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        buttons.addWidget(self.demo_button)
        return buttons

    # ---- background work
    def _start(self, task: Task) -> None:
        task.on_progress = self._on_progress
        self.task = task.start(self.runner)

    def busy(self) -> bool:
        return self.task is not None and self.task.running

    # ---- the machine and the recommendation
    def _on_checked(self, task: Task) -> None:
        if task.error or task.result is None:
            self.facts.setText(tr("This machine could not be checked: {why}").format(why=task.error))
            self.message.setText(tr("You can choose models in Models at any time."))
            return
        rec = self.recommendation = task.result
        snap = rec.snapshot
        cores = tr("{n} cores").format(n=snap.cpu_logical) + (
            tr(" ({n} physical)").format(n=snap.cpu_physical) if snap.cpu_physical else "")
        lines = [tr("CPU: {name}, {cores}").format(name=rec.cpu_name, cores=cores),
                 tr("RAM: {total} GB, {free} GB free").format(total=f"{snap.ram_total_bytes / GB:.1f}",
                                                             free=f"{snap.ram_available_bytes / GB:.1f}")]
        real = [g for g in snap.gpus if not g.software]
        for g in real:
            lines.append(tr("GPU: {name}, {free} GB of {total} GB free").format(
                name=g.name, free=f"{g.free_bytes / GB:.1f}", total=f"{g.total_bytes / GB:.1f}")
                + ("" if g.device else tr(" (no backend can use it)")))
        if not real:
            lines.append(tr("GPU: none usable; models run on the CPU"))
        self.facts.setText("\n".join(lines))
        self.picks = [(tier, p) for tier, p in (("L1", rec.l1), ("L2", rec.l2)) if p is not None]
        self.models.setRowCount(len(self.picks))
        where = {"L1": tr("L1 · quick answers (CPU)"),
                 "L2": tr("L2 · harder questions (GPU)") if rec.gpu else tr("L2 · harder questions (CPU)")}
        for row, (tier, p) in enumerate(self.picks):
            needs = tr("RAM {n} GB").format(n=f"{p.ram_bytes / GB:.1f}") + (
                tr(" · VRAM {n} GB").format(n=f"{p.vram_bytes / GB:.1f}") if p.vram_bytes else "")
            size = sum(e.size_bytes for e in self._files(p.entry))  # its draft comes with it
            for col, text in enumerate((where[tier], pair_label(p.entry, self.catalog), f"{size / GB:.1f} GB", needs,
                                        _speed_text(p.speed, p.tok_s))):
                item = QTableWidgetItem(text)
                item.setToolTip(p.why)
                self.models.setItem(row, col, item)
        self.models.resizeColumnsToContents()
        self.models.setFixedHeight(self.models.horizontalHeader().height() + 4
                                   + sum(self.models.rowHeight(r) for r in range(self.models.rowCount())))
        if not self.picks:
            self.message.setText(tr("No model in the catalog fits this machine's free memory; try the demo models, "
                                    "or pick one in Models."))
            return
        why = [tr("L1 is the largest model that answers quickly on this CPU with at most half the free RAM.")]
        if rec.l2 is None:
            why.append(tr("No larger model fits beside it, so L2 uses the same model."))
        elif rec.gpu is not None:
            why.append(tr("L2 is the largest model that fits whole in the free memory of {gpu}.").format(
                gpu=rec.gpu.name))
        else:
            why.append(tr("Without a usable GPU, L2 is a larger model on the CPU: slower, better at harder questions."))
        for p in {p.entry.id: p for _tier, p in self.picks}.values():  # once if L1 and L2 are one model
            draft = self.catalog.draft_of(p.entry)
            if draft is not None:
                why.append(tr("{name} comes with a {size} draft model of its family: it guesses a few words ahead "
                              "and {name} checks them in one step, so answers come faster and read the same.").format(
                    name=p.entry.name, size=draft_size(draft)))
        why.append(self._vision_note(rec))
        self.why.setText(" ".join(w for w in why if w))
        self.download_button.setEnabled(True)

    def _vision_note(self, rec) -> str:
        """A sentence on images (issue 41): a pick that reads them, or one that would fit beside L1."""
        v = rec.vision
        if v is None:
            return ""
        if any(p is v for _tier, p in self.picks):
            return tr("{name} reads images too: paste a screenshot or drop a photo into a message.").format(
                name=v.entry.name)
        size = sum(e.size_bytes for e in self._files(v.entry))
        return tr("To chat about images, {name} ({size} GB with its projector) fits beside them: get it in "
                  "Models and use it for a tier.").format(name=v.entry.name, size=f"{size / GB:.1f}")

    # ---- actions
    def _files(self, entry) -> list:
        """What choosing `entry` downloads: it, its vision projector, and the draft model the
        catalog pairs with it. Each does nothing alone, so it comes without a question."""
        return [entry, *companions(entry, self.catalog)]

    def download_and_use(self) -> None:
        if not self.picks or self.busy():
            return
        seen, self.queue = set(), []
        for _tier, p in self.picks:
            for e in self._files(p.entry):
                if e.id not in seen and not e.present():
                    seen.add(e.id)
                    self.queue.append(e)
        self.queued = len(self.queue)
        self.download_button.setEnabled(False)
        self.demo_button.setEnabled(False)
        self.cancel_button.show()
        self.message.setText("")
        self._next_download()

    def _next_download(self) -> None:
        if not self.queue:
            self._use_picks()
            return
        entry, hub_id = self.queue[0], self.hub.currentData()
        self.bar.setValue(0)
        self.bar.show()
        self.message.setText(tr("Downloading {name} ({i} of {n})…").format(
            name=entry.name, i=self.queued - len(self.queue) + 1, n=self.queued))
        self._start(Task(lambda t: download(entry, t.report, t.cancel, hub=hub_id), self._on_downloaded))

    def _on_progress(self, done: int, total: int) -> None:
        self.bar.setRange(0, max(total // 1024, 1))
        self.bar.setValue(done // 1024)
        self.bar.setFormat(f"{done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    def _on_downloaded(self, task: Task) -> None:
        if task.error:
            self.bar.hide()
            self.cancel_button.hide()
            self.download_button.setEnabled(True)
            self.demo_button.setEnabled(True)
            self.message.setText(tr("Download cancelled; it resumes where it stopped next time.") if task.cancelled
                                 else tr("Download failed: {why}").format(why=task.error))
            return
        self.queue.pop(0)
        self._next_download()

    def _use_picks(self) -> None:
        ids = {tier: p.entry.id for tier, p in self.picks}
        ids.setdefault("L2", ids.get("L1"))  # no larger model fits: L2 answers with L1's model
        ids.setdefault("L1", ids["L2"])
        for tier, model_id in ids.items():
            self.settings.set(f"tier.{tier}", model_id)
        self.settings.set("ui.welcome_done", True)
        self.bar.hide()
        self.cancel_button.hide()
        self.message.setText(tr("Ready: L1 uses {l1}, L2 uses {l2}.").format(l1=ids["L1"], l2=ids["L2"]))
        self.sig_tiers_changed.emit(json.dumps(["tier.L1", "tier.L2"]))
        self.sig_dismissed.emit()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel.set()

    def try_demo(self) -> None:
        self.settings.set("ui.welcome_done", True)
        self.sig_dismissed.emit()

    def close_work(self) -> None:
        """Stop a download in progress and wait for the thread (the window is closing)."""
        if self.task is not None:
            self.task.cancel.set()
        self.runner.close()
