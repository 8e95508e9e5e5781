"""Looks: the bundled CJK font renders Chinese, widgets carry their stable names, and screenshots
of the main window in both themes are not blank. They are saved in the test's tmp folder; to
refresh the docs' copies, run with ASSISTANT_SCREENSHOTS=docs/screenshots."""

import os
from pathlib import Path

from PySide6.QtGui import QFont, QRawFont
from PySide6.QtWidgets import QApplication, QWidget

from app.main import CJK_FAMILY, create_main_window
from app.engine_worker import EngineWorker
from app.theme import apply_theme

from .helpers import save_image, send

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("conversationList newConversationButton searchBox chatView composer sendButton "
         "routeOverride vramGauge ramGauge kvGauge contextLevel confidenceWarning "
         "settingsButton modelManagerButton").split()


def test_chinese_renders_with_the_bundled_font(qtbot):
    w = create_main_window(worker=EngineWorker("/nonexistent.gguf", memory=False))
    qtbot.addWidget(w)
    assert CJK_FAMILY in QApplication.instance().font().families()
    raw = QRawFont.fromFont(QFont(CJK_FAMILY))
    assert all(raw.supportsCharacter(ord(c)) for c in "你好，世界。可能不准确")
    assert all(raw.glyphIndexesForString("你好"))  # real glyphs, not the empty box
    w.close()


def blank(image) -> bool:
    """True when the image is (nearly) one colour."""
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
    return len(colours) < 8


def test_widget_names_and_screenshots_in_both_themes(qtbot, model_paths, tmp_path):
    w = create_main_window("demo-small", temperature=0.0, max_tokens=24)
    qtbot.addWidget(w)
    for name in NAMES:
        assert w.findChild(QWidget, name) is not None, name
    w.resize(1200, 760)
    w.show()
    qtbot.waitUntil(lambda: w.engine_ready, timeout=120_000)
    send(qtbot, w, "你好！Please write `print('hi')` in Python.")
    # Tracked files change only when asked: a test run leaves the working tree as it found it.
    out = ROOT / os.environ["ASSISTANT_SCREENSHOTS"] if os.environ.get("ASSISTANT_SCREENSHOTS") else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    for theme in ("light", "dark"):
        apply_theme(theme)
        w.view._cache.clear()
        w.view._render()
        qtbot.wait(100)
        image = w.grab().toImage()
        assert not blank(image), theme
        save_image(image, out / f"main-window-{theme}.png")
    apply_theme("light")
    w.close()


def test_a_high_warning_threshold_flags_the_answer(qtbot, model_paths, monkeypatch):
    monkeypatch.setenv("ASSISTANT_CONFIDENCE_WARN_THRESHOLD", "0.999")
    w = create_main_window("demo-small", temperature=0.0, max_tokens=16)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_ready, timeout=120_000)
    done = send(qtbot, w, "What is the capital of Mongolia?")
    assert done.stats["confidence"]["low"]
    assert w.confidence_warning.isVisible() and "may be inaccurate" in w.confidence_warning.text()
    assert "可能不准确" in w.view.toHtml()
    w.close()


def test_a_gpu_that_cannot_be_used_is_said_in_the_banner(qtbot, model_paths, monkeypatch):
    """The settings name a GPU this machine does not have: the answer still comes (on the CPU) and
    the window's banner says why (done.stats.offload.note)."""
    monkeypatch.setenv("ASSISTANT_RUNTIME_GPU_DEVICE", "NoSuchGPU0")
    w = create_main_window("demo-small", temperature=0.0, max_tokens=4)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_ready, timeout=120_000)
    offload = send(qtbot, w, "Hello!").stats["offload"]
    assert offload["backend"] == "cpu" and "NoSuchGPU0" in offload["note"]
    assert w.banner.isVisible() and "NoSuchGPU0" in w.banner.text() and "running on the CPU" in w.banner.text()
    w.close()
