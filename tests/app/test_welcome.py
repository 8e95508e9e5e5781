"""The first-start welcome: shown on an empty data dir with demo tiers, "Try the demo models" dismisses it
for good, "Download and use" fetches the recommended pair (and the draft model the catalog pairs with
one of them) from a local fake hub and switches the running engine's tiers, errors read as plain
words, and the hub defaults to one reachable from mainland China under zh_CN. Screenshots: ASSISTANT_SCREENSHOTS=docs/screenshots to refresh them."""

import dataclasses

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from app.engine_worker import EngineWorker
from app.main_window import MainWindow
from app.welcome import WelcomePanel
from engine.config.settings import Settings
from engine.models.catalog import load_catalog
from engine.models.devices import snapshot
from engine.models.recommend import Pick, Recommendation
from tests.hub_server import HubServer

from .helpers import in_language, save_screenshot, screenshot_dir, send


def open_window(qtbot):
    w = MainWindow(EngineWorker(None, n_ctx=1024, memory=False), temperature=0.0, max_tokens=4)
    qtbot.addWidget(w)
    w.show()
    return w


def panel_of(w):
    return w.findChild(QWidget, "welcomePanel")


@pytest.fixture
def models_dir(tmp_path, monkeypatch, model_paths):
    """An empty models folder but for the demo model the tiers start on (a fresh install)."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / model_paths["demo-small"].name).symlink_to(model_paths["demo-small"])
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(folder))
    return folder


def two_real_entries():
    entries = [e for e in load_catalog().entries if not e.demo and e.repo_for("huggingface")]
    return [dataclasses.replace(e, sha256="") for e in entries[:2]]  # the fake hub serves the demo's bytes


def serve_pair(monkeypatch, model_paths, throttle_bytes_per_s: float):
    """Two real catalog entries and their draft models served by a fake Hugging Face hub (the demo
    model's bytes under their names) and recommended as the pair; (l1, l2, hub)."""
    l1, l2 = two_real_entries()
    catalog = load_catalog()
    files = [e for e in (l1, l2, catalog.draft_of(l1), catalog.draft_of(l2)) if e is not None]
    hub = HubServer({f"{e.repo_for('huggingface')}/{e.file}": model_paths["demo-small"] for e in files},
                    throttle_bytes_per_s=throttle_bytes_per_s)
    monkeypatch.setenv("ASSISTANT_HUB_HUGGINGFACE", hub.url)
    monkeypatch.setenv("ASSISTANT_MODELS_HUB", "huggingface")  # settings: models.hub
    scripted(monkeypatch, l1, l2)
    return l1, l2, hub


def scripted(monkeypatch, l1, l2):
    pick = lambda e: Pick(e, e.size_bytes, 0, 20.0, "fast", "test pick")  # noqa: E731
    rec = Recommendation(pick(l1), pick(l2), snapshot(), "Test CPU", None, 8 << 30)
    monkeypatch.setattr("app.welcome.recommend_models", lambda **_kw: rec)


def test_first_start_shows_the_welcome_and_try_demo_dismisses_it_for_good(qtbot, assistant_home, models_dir):
    w = open_window(qtbot)
    try:
        panel = panel_of(w)
        assert panel is not None and panel.isVisible() and not w.view.isVisible()
        facts = panel.findChild(QWidget, "machineFacts")
        qtbot.waitUntil(lambda: "CPU:" in facts.text(), timeout=60_000)  # the check runs off the GUI thread
        assert "RAM:" in facts.text() and "GPU:" in facts.text()
        table = panel.findChild(QWidget, "recommendedModels")
        for row in range(table.rowCount()):  # whatever fits this machine: size, need and speed class
            assert "GB" in table.item(row, 2).text() and "RAM" in table.item(row, 3).text()
            assert table.item(row, 4).text().split(" ")[0] in ("fast", "usable", "slow")
        qtbot.mouseClick(panel.findChild(QWidget, "tryDemo"), Qt.LeftButton)
        assert panel.isHidden() and w.view.isVisible()
        assert Settings(assistant_home / "settings.json").get("ui.welcome_done") is True
    finally:
        w.close()
    again = open_window(qtbot)
    try:
        assert again.doors.welcome is None and panel_of(again) is None
    finally:
        again.close()


def test_download_and_use_switches_the_tiers_in_two_clicks(qtbot, assistant_home, models_dir, model_paths,
                                                          monkeypatch):
    l1, l2, hub = serve_pair(monkeypatch, model_paths, 40e6)
    w = open_window(qtbot)
    try:
        panel = panel_of(w)
        button = panel.findChild(QWidget, "downloadAndUse")
        qtbot.waitUntil(button.isEnabled, timeout=30_000)
        assert panel.findChild(QWidget, "hubEndpoint").currentData() == "huggingface"
        table = panel.findChild(QWidget, "recommendedModels")
        # The 7B comes with its draft: the row says so, its size counts it, the reason explains it.
        draft = load_catalog().draft_of(l2)
        assert (l1.id, l2.id, draft.id) == ("qwen2.5-1.5b-instruct-q4_k_m", "qwen2.5-7b-instruct-q4_k_m",
                                            "qwen2.5-0.5b-instruct")
        assert [table.item(r, 1).text() for r in range(2)] == \
            [l1.name, f"{l2.name} · with 0.5B draft (faster answers)"]
        assert table.item(1, 2).text() == f"{(l2.size_bytes + draft.size_bytes) / 1e9:.1f} GB"
        assert "comes with a 0.5B draft model of its family" in panel.why.text()
        qtbot.mouseClick(button, Qt.LeftButton)  # click one
        message = panel.findChild(QWidget, "welcomeMessage")
        qtbot.waitUntil(lambda: "(1 of 3)" in message.text(), timeout=30_000)
        bar = panel.findChild(QWidget, "welcomeProgress")
        qtbot.waitUntil(lambda: bar.isVisible() and bar.value() > 0, timeout=30_000)  # progress shows
        qtbot.waitUntil(panel.isHidden, timeout=120_000)
        settings = Settings(assistant_home / "settings.json")
        assert (settings.get("tier.L1"), settings.get("tier.L2"), settings.get("ui.welcome_done")) == \
            (l1.id, l2.id, True)
        for e in (l1, l2, draft):
            assert (models_dir / e.file).read_bytes() == model_paths["demo-small"].read_bytes()
        # The running engine took the new tiers: the next answer (click two) comes from one of them.
        qtbot.waitUntil(lambda: w.engine_ready, timeout=120_000)
        qtbot.waitUntil(lambda: w.status_label.text() == "Settings applied", timeout=30_000)
        done = send(qtbot, w, "Hello!")
        assert done.model in (l1.id, l2.id), done
    finally:
        w.close()
        hub.stop()


def test_cancel_and_an_unreachable_hub_are_said_in_plain_words(qtbot, assistant_home, models_dir, model_paths,
                                                              monkeypatch):
    l1, l2, hub = serve_pair(monkeypatch, model_paths, 2e6)
    w = open_window(qtbot)
    try:
        panel = panel_of(w)
        button, cancel = panel.findChild(QWidget, "downloadAndUse"), panel.findChild(QWidget, "cancelDownload")
        message = panel.findChild(QWidget, "welcomeMessage")
        qtbot.waitUntil(button.isEnabled, timeout=30_000)
        qtbot.mouseClick(button, Qt.LeftButton)
        qtbot.waitUntil(lambda: panel.findChild(QWidget, "welcomeProgress").value() > 0, timeout=30_000)
        qtbot.mouseClick(cancel, Qt.LeftButton)
        qtbot.waitUntil(button.isEnabled, timeout=30_000)
        assert "cancelled" in message.text() and not panel.isHidden() and cancel.isHidden()
        assert Settings(assistant_home / "settings.json").get("tier.L1") == "demo-small"
        hub.stop()  # the hub goes away: the next try says so
        qtbot.mouseClick(button, Qt.LeftButton)
        qtbot.waitUntil(button.isEnabled, timeout=60_000)
        text = message.text()
        assert text.startswith("Download failed: ") and "Error" not in text and "Traceback" not in text, text
    finally:
        w.close()


def test_the_hub_defaults_by_locale_and_screenshots(qtbot, assistant_home, tmp_path, monkeypatch):
    out = screenshot_dir(tmp_path)
    for language, hub in (("en", "huggingface"), ("zh_CN", "modelscope")):
        monkeypatch.setenv("ASSISTANT_UI_LANGUAGE", language)
        with in_language(language):
            panel = WelcomePanel(Settings(assistant_home / "settings.json"))
            qtbot.addWidget(panel)
            assert panel.hub.currentData() == hub
            # The check's result arrives by a queued signal after its thread ends: wait for that.
            qtbot.waitUntil(lambda: panel.recommendation is not None, timeout=60_000)
            save_screenshot(qtbot, panel, out / f"welcome-{language}.png", 820, 620)
            panel.close_work()
            panel.close()
    # a choice the user makes is kept over the locale's default
    panel = WelcomePanel(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(panel)
    panel.hub.setCurrentIndex(panel.hub.findData("hf-mirror"))
    panel.hub.activated.emit(panel.hub.currentIndex())
    panel.close_work()
    assert Settings(assistant_home / "settings.json").get("models.hub") == "hf-mirror"
