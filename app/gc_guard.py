"""Python's cyclic garbage collected on the GUI thread only.

Python runs its cycle collector in whichever thread happens to allocate when a threshold is
crossed: a Runner thread (app/background.py) starting a job, the engine's thread. A cycle that
holds Qt objects made on the GUI thread (a closed dialog and the lambdas its signals keep) is then
freed there, and a QObject destroyed off its thread can crash the process: seen twice as
"Fatal Python error: Segmentation fault … Garbage-collecting" in a Runner thread's first job. So
automatic collection is off, and a timer on the GUI thread collects with Python's own thresholds
(the approach PyQt's and PySide's users settled on). Reference counting, which frees everything
that is not in a cycle, is untouched."""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500


class GuiThreadCollector(QObject):
    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.setInterval(INTERVAL_MS)
        self.timer.timeout.connect(self.check)
        self.timer.start()

    def check(self) -> None:
        """Collect the youngest generation that crossed its threshold, as gc would have."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self.thresholds[generation]:
                gc.collect(generation)
                return


def install(app) -> GuiThreadCollector:
    """Once per QApplication (kept on it)."""
    collector = getattr(app, "_gui_thread_gc", None)
    if collector is None:
        collector = app._gui_thread_gc = GuiThreadCollector(app)
    return collector


def uninstall(app) -> None:
    """Automatic collection back (a test process that goes on without a GUI)."""
    collector = getattr(app, "_gui_thread_gc", None)
    if collector is not None:
        collector.timer.stop()
        collector.deleteLater()
        app._gui_thread_gc = None
    gc.enable()
