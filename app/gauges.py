"""Live gauges: VRAM per GPU (or "no GPU"), RAM of the app and the system, the CPU threads each
loaded model runs and why, KV pages per loaded model with this conversation's share, and the
conversation's context water level. Redrawn every GAUGE_MS from the status snapshot the engine
publishes (measured, never estimated): the GUI thread reads that dict and never asks a model or a
device itself."""

from __future__ import annotations

import logging

import psutil
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QProgressBar, QVBoxLayout, QWidget

from app.i18n import tr
from app.theme import set_tone

log = logging.getLogger(__name__)
GAUGE_MS = 500


def _bar(maximum: int = 100) -> QProgressBar:
    bar = QProgressBar()
    bar.setRange(0, maximum)
    bar.setTextVisible(True)
    return bar


def _model_name(ident: str) -> str:
    return ident.split(":")[0].removesuffix(".gguf")


def _count(n: int) -> str:
    return tr("1 thread") if n == 1 else tr("{n} threads").format(n=n)


def _reduced(t: dict) -> bool:
    return t["decode"] < t["best_decode"] or t["batch"] < t["best_batch"]


def threads_text(t: dict) -> str:
    """A model's threads as the status publishes them (engine/inference/thread_policy.py ThreadState's
    fields) in the UI's words: "2 threads", "1 thread while other programs are busy (2 when quiet)",
    "2 threads (set in Settings)"; the prompt count too where it differs."""
    counts = _count(t["decode"])
    if t["batch"] != t["decode"]:
        counts = tr("{threads}, {n} for prompts").format(threads=counts, n=t["batch"])
    if t.get("reason") == "manual":
        return tr("{threads} (set in Settings)").format(threads=counts)
    if _reduced(t):
        return tr("{threads} while other programs are busy ({best} when quiet)").format(
            threads=counts, best=_count(t["best_decode"]))
    if t.get("reason") == "default":
        return tr("{threads} (one per core)").format(threads=counts)
    return counts


def threads_tip(t: dict) -> str:
    """Why: the tooltip of the CPU threads row."""
    if t.get("reason") == "manual":
        return tr("A fixed count from Settings: it does not change while other programs are busy.")
    load = tr("Other programs use {others} of {cpus} CPUs now.").format(others=f"{t.get('others', 0.0):.1f}",
                                                                       cpus=t["cpus"])
    if t.get("reason") == "default":
        return tr("One thread per core (not measured for this model); fewer while other programs are busy.") + " " + load
    return tr("Measured for this model on this computer; fewer while other programs are busy.") + " " + load


class GaugePanel(QGroupBox):
    def __init__(self, status_source, parent=None):
        """`status_source()` returns the engine's published status dict (empty until it is ready)."""
        super().__init__(tr("Resources"), parent)
        self.status_source = status_source
        self.conversation_id: int | None = None
        self.water: dict | None = None
        self.on_summary = lambda text: None  # one line of the gauges, for the folded panel's strip
        self._proc = psutil.Process()
        self.busy_threads = ""  # the strip's note while a model runs fewer threads than its best
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.vram = QLabel(tr("no GPU"))
        self.ram_app, self.ram_sys = _bar(), _bar()
        self.kv_box = QWidget()
        self.kv_layout = QFormLayout(self.kv_box)
        self.water_bar = _bar()
        self.threads = QLabel(tr("no model loaded"))
        self.threads.setObjectName("threadsGauge")
        self.threads.setWordWrap(True)
        form.addRow(tr("VRAM"), self.vram)
        form.addRow(tr("RAM (app)"), self.ram_app)
        form.addRow(tr("RAM (system)"), self.ram_sys)
        form.addRow(tr("CPU threads"), self.threads)
        form.addRow(tr("Context"), self.water_bar)
        layout.addLayout(form)
        layout.addWidget(QLabel(tr("KV cache pages (256 tokens)")))
        layout.addWidget(self.kv_box)
        layout.addStretch(1)
        self._kv_bars: dict[str, QProgressBar] = {}
        self.timer = QTimer(self)
        self.timer.setInterval(GAUGE_MS)
        self.timer.timeout.connect(self.update_now)
        self.timer.start()
        self.update_now()

    def set_water_level(self, context: dict | None) -> None:
        self.water = context
        self._draw_water()

    def _draw_water(self) -> None:
        c = self.water
        if not c:
            self.water_bar.setValue(0)
            self.water_bar.setFormat(tr("no turn yet"))
            return
        pct = int(round(c["water_level"] * 100))
        self.water_bar.setValue(min(pct, 100))
        est = "~" if c.get("estimated") else ""
        self.water_bar.setFormat(f"{est}{c['used']} / {c['n_ctx']} ({pct} %)")
        set_tone(self.water_bar, "warn" if c.get("warn") else "")

    def update_now(self) -> None:
        try:
            status = self.status_source() or {}
            devices = status.get("devices") or {}
            gpu = status.get("gpu")  # the device the GPU tier loads on, not every card in the machine
            if gpu:
                self.vram.setText(f"{gpu['name']} ({gpu['backend']}): {gpu['used_bytes'] / 2**20:.0f} / "
                                  f"{gpu['total_bytes'] / 2**20:.0f} MiB")
            else:
                self.vram.setText(tr("no GPU"))
            self.vram.setToolTip(devices.get("note") or "")
            if devices:  # the engine's reading; psutil here only until the engine is up
                total, available, rss = (devices["ram_total_bytes"], devices["ram_available_bytes"],
                                         devices["process_rss_bytes"])
            else:
                vm = psutil.virtual_memory()
                total, available, rss = vm.total, vm.available, self._proc.memory_info().rss
            self.ram_app.setValue(int(100 * rss / total))
            self.ram_app.setFormat(f"{rss / 2**20:.0f} MiB")
            self.ram_sys.setValue(int(100 * (total - available) / total))
            self.ram_sys.setFormat(f"{(total - available) / 2**30:.1f} / {total / 2**30:.1f} GiB")
            self._draw_kv(status.get("kv") or {})
            self._draw_threads(status.get("models") or [])
            self.on_summary(self.summary(rss))
        except Exception:  # noqa: BLE001 - a gauge must never take the window down
            log.exception("gauge update failed")

    def summary(self, rss: int) -> str:
        """"RAM 301 MiB · context 71 %" (and the GPU's use, when there is one)."""
        parts = [tr("RAM {mib} MiB").format(mib=f"{rss / 2**20:.0f}")]
        if self.water:
            parts.append(tr("context {pct} %").format(pct=int(round(self.water["water_level"] * 100))))
        if self.vram.text() != tr("no GPU"):
            parts.insert(0, self.vram.text().split(":")[-1].strip())
        if self.busy_threads:  # fewer threads than the quiet machine's best: why answers are slower now
            parts.append(self.busy_threads)
        return " · ".join(parts)

    def _draw_threads(self, models: list[dict]) -> None:
        """One line per loaded model (named when there are several): its threads now and why."""
        shown = [m for m in models if m.get("threads")]
        lines, tips, self.busy_threads = [], [], ""
        for m in shown:
            t = m["threads"]
            name = _model_name(m.get("identity") or m.get("id") or "")
            lines.append(threads_text(t) if len(shown) == 1 else f"{name}: {threads_text(t)}")
            tips.append(threads_tip(t))
            if _reduced(t) and t.get("reason") != "manual" and not self.busy_threads:
                self.busy_threads = tr("{n}/{best} CPU threads (other programs busy)").format(
                    n=t["decode"], best=t["best_decode"])
        self.threads.setText("\n".join(lines) if lines else tr("no model loaded"))
        self.threads.setToolTip("\n".join(dict.fromkeys(tips)))

    def _draw_kv(self, pages: dict) -> None:
        for ident, p in pages.items():
            if ident.startswith("_"):
                continue
            bar = self._kv_bars.get(ident)
            if bar is None:
                bar = self._kv_bars[ident] = _bar()
                bar.share = QLabel()
                self.kv_layout.addRow(QLabel(_model_name(ident)))
                self.kv_layout.addRow(bar)
                self.kv_layout.addRow(bar.share)
            bar.setRange(0, max(p["capacity"], 1))
            bar.setValue(min(p["used"], p["capacity"]))
            mine = p["conversations"].get(str(self.conversation_id), {})
            bar.setFormat(tr("{used} / {cap} pages").format(used=p["used"], cap=p["capacity"]))
            bar.share.setText(tr("this chat: {hot} hot · {warm} warm · {cold} cold").format(
                hot=mine.get("hot", 0), warm=mine.get("warm", 0), cold=mine.get("cold", 0)))
