"""Live gauges: VRAM per GPU (or "no GPU"), RAM of the app and the system, KV pages per loaded
model with this conversation's share, and the conversation's context water level. Redrawn every
GAUGE_MS from the status snapshot the engine publishes (measured, never estimated): the GUI
thread reads that dict and never asks a model or a device itself."""

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


class GaugePanel(QGroupBox):
    def __init__(self, status_source, parent=None):
        """`status_source()` returns the engine's published status dict (empty until it is ready)."""
        super().__init__(tr("Resources"), parent)
        self.status_source = status_source
        self.conversation_id: int | None = None
        self.water: dict | None = None
        self.on_summary = lambda text: None  # one line of the gauges, for the folded panel's strip
        self._proc = psutil.Process()
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.vram = QLabel(tr("no GPU"))
        self.ram_app, self.ram_sys = _bar(), _bar()
        self.kv_box = QWidget()
        self.kv_layout = QFormLayout(self.kv_box)
        self.water_bar = _bar()
        form.addRow(tr("VRAM"), self.vram)
        form.addRow(tr("RAM (app)"), self.ram_app)
        form.addRow(tr("RAM (system)"), self.ram_sys)
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
        return " · ".join(parts)

    def _draw_kv(self, pages: dict) -> None:
        for ident, p in pages.items():
            if ident.startswith("_"):
                continue
            bar = self._kv_bars.get(ident)
            if bar is None:
                bar = self._kv_bars[ident] = _bar()
                bar.share = QLabel()
                self.kv_layout.addRow(QLabel(ident.split(":")[0].removesuffix(".gguf")))
                self.kv_layout.addRow(bar)
                self.kv_layout.addRow(bar.share)
            bar.setRange(0, max(p["capacity"], 1))
            bar.setValue(min(p["used"], p["capacity"]))
            mine = p["conversations"].get(str(self.conversation_id), {})
            bar.setFormat(tr("{used} / {cap} pages").format(used=p["used"], cap=p["capacity"]))
            bar.share.setText(tr("this chat: {hot} hot · {warm} warm · {cold} cold").format(
                hot=mine.get("hot", 0), warm=mine.get("warm", 0), cold=mine.get("cold", 0)))
