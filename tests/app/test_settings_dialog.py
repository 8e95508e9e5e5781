"""The settings panel: persisted values, the VRAM slider on a machine without a GPU, the planner's
live preview, the CPU threads override, and the L3 connection test against a real OpenAI-compatible
server on loopback."""

import json

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QApplication

from app.i18n import install, tr
from app.settings_dialog import SettingsDialog
from app.theme import apply_theme
from engine.models.devices import snapshot
from engine.config.settings import Settings
from tests.model.l3_server import LoopbackServer

from .helpers import in_language, save_screenshot, screenshot_dir


def test_values_persist_and_the_vram_slider_explains_itself(qtbot, assistant_home, model_paths):
    settings = Settings(assistant_home / "settings.json")
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    if snapshot().best_gpu is None:  # this machine: the slider is off, and says why
        assert not dialog.vram.isEnabled() and "No GPU" in dialog.vram_label.text()
        assert "runs on the CPU" in dialog.preview.text()
    else:
        dialog.vram.setValue(dialog.vram.maximum())
        assert "layers on the GPU" in dialog.preview.text()
    # The preview follows the slider (forced on here when the machine has no GPU: the planner is real).
    dialog.vram.setEnabled(True)
    dialog.vram.setRange(0, 8192)
    dialog.vram.setValue(0)
    cpu_text = dialog.preview.text()
    dialog.vram.setValue(8192)
    assert dialog.preview.text() != cpu_text and "fits on the GPU" in dialog.preview.text()
    dialog.vram.setEnabled(snapshot().best_gpu is not None)
    dialog.cascade.setChecked(False)
    dialog.summary.setValue(7)
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.language.setCurrentIndex(dialog.language.findData("zh_CN"))
    dialog.l3_url.setText("http://127.0.0.1:9/v1")
    dialog.save()
    saved = json.loads((assistant_home / "settings.json").read_text())
    assert saved["cascade.enabled"] is False and saved["summary.every_turns"] == 7
    assert saved["ui.theme"] == "dark" and saved["ui.language"] == "zh_CN"
    assert saved["l3.base_url"] == "http://127.0.0.1:9/v1"
    assert Settings(assistant_home / "settings.json").get("summary.every_turns") == 7


def test_l3_connection_test_talks_to_a_real_server(qtbot, assistant_home, model_paths):
    dialog = SettingsDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    dialog.l3_url.setText("http://127.0.0.1:9/v1")  # nothing listens there
    dialog._test_l3()
    assert "unreachable" in dialog.l3_result.text()
    server = LoopbackServer(model_paths["demo-small"])
    try:
        dialog.l3_url.setText(server.url)
        dialog._test_l3()
        assert dialog.l3_result.text() == "connected: loopback-smollm2"
    finally:
        server.stop()


def test_chinese_and_dark_theme_apply(qtbot):
    app = QApplication.instance()
    translator = install(app, "zh_CN")
    try:
        assert tr("Settings") == "设置" and tr("Send") == "发送"
        # Qt's own strings (standard buttons) from the bundled qtbase_zh_CN.qm
        assert QCoreApplication.translate("QPlatformTheme", "Cancel") == "取消"
    finally:
        app.removeTranslator(translator)
        app.removeTranslator(translator.qt)
    assert tr("Settings") == "Settings"
    assert QCoreApplication.translate("QPlatformTheme", "Cancel") == "Cancel"
    apply_theme("dark")
    assert app.palette().window().color().name() == "#202124"
    apply_theme("light")


def test_settings_survive_a_restart_of_the_window(qtbot, assistant_home, model_paths):
    from app.engine_worker import EngineWorker
    from app.main import create_main_window

    Settings().set("router.mode", "L1")
    w = create_main_window(worker=EngineWorker("demo-small", memory=False))
    qtbot.addWidget(w)
    assert w.composer.route.currentData() == "L1"  # read from settings.json at start
    w.close()


def test_the_settings_file_is_the_users_only(assistant_home):
    s = Settings(assistant_home / "settings.json")
    s.set("l3.api_key", "sk-secret")
    assert (assistant_home / "settings.json").stat().st_mode & 0o777 == 0o600


def test_the_window_answers_on_the_l3_endpoint_from_settings(qtbot, assistant_home, model_paths):
    from app.engine_worker import EngineWorker
    from app.main import create_main_window

    server = LoopbackServer(model_paths["demo-small"])
    try:
        Settings().set("l3.base_url", server.url)
        w = create_main_window(worker=EngineWorker("demo-small", memory=False), temperature=0.0, max_tokens=8)
        qtbot.addWidget(w)
        qtbot.waitUntil(lambda: w.engine_ready, timeout=120_000)
        w.send_message("Hello!", route="L3")
        qtbot.waitUntil(lambda: not w.busy and w.last_done is not None, timeout=120_000)
        assert w.last_done.level == "L3" and not w.last_done.fallback, w.last_done
        w.close()
    finally:
        server.stop()


def test_gpu_choice_lists_ggml_devices_and_persists(qtbot, assistant_home, model_paths, tmp_path):
    """The GPU row lists automatic, none and every device ggml offers (the software lavapipe only by
    name); screenshots in English and Chinese (ASSISTANT_SCREENSHOTS=docs/screenshots to refresh)."""
    snap = snapshot()
    names = [g.device for g in snap.gpus if g.device]
    out = screenshot_dir(tmp_path)
    for language in ("en", "zh_CN"):
        with in_language(language):
            settings = Settings(assistant_home / "settings.json")
            dialog = SettingsDialog(settings)
            qtbot.addWidget(dialog)
            combo = dialog.gpu_device
            assert [combo.itemData(i) for i in range(combo.count())] == ["auto", "none", *names]
            assert combo.currentData() == "auto"
            software = [g for g in snap.gpus if g.software]
            if software:  # lavapipe here: listed, marked, never the automatic choice
                label = combo.itemText(combo.findData(software[0].device))
                assert tr(" (software)").strip() in label and software[0].backend in label
            save_screenshot(qtbot, dialog, out / f"settings-gpu-{language}.png", 640, 900)
            dialog.close()
    dialog = SettingsDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    pick = names[0] if names else "none"
    dialog.gpu_device.setCurrentIndex(dialog.gpu_device.findData(pick))
    dialog.save()
    assert Settings(assistant_home / "settings.json").get("runtime.gpu_device") == pick


def test_the_reasoning_group_saves_its_settings(qtbot, assistant_home):
    settings = Settings(assistant_home / "settings.json")
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    group = dialog.reasoning
    assert group.think.isChecked() and group.quick.isChecked() and group.budget.value() == 0
    assert group.history.currentData() == "template"
    group.think.setChecked(False)
    group.quick.setChecked(False)
    group.budget.setValue(1024)
    group.history.setCurrentIndex(group.history.findData("keep"))
    dialog.save()
    stored = json.loads((assistant_home / "settings.json").read_text(encoding="utf-8"))
    assert (stored["reasoning.think"], stored["reasoning.quick_off"], stored["reasoning.budget_tokens"],
            stored["reasoning.history"]) == (False, False, 1024, "keep")


def test_the_cpu_threads_override_saves_runtime_n_threads(qtbot, assistant_home):
    """Automatic (0) by default, 1 … the machine's CPUs by hand; the row says it waits for a restart."""
    settings = Settings(assistant_home / "settings.json")
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    box = dialog.n_threads
    assert (box.value(), box.text(), box.minimum(), box.maximum()) == (0, "Automatic", 0, snapshot().cpu_logical)
    assert "fewer while other programs are busy" in box.toolTip() and "restart" in box.accessibleName()
    box.stepBy(1)
    dialog.save()
    assert json.loads((assistant_home / "settings.json").read_text(encoding="utf-8"))["runtime.n_threads"] == 1
    dialog = SettingsDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    assert dialog.n_threads.value() == 1
    dialog.n_threads.setValue(0)
    dialog.save()
    assert Settings(assistant_home / "settings.json").get("runtime.n_threads") == 0
    with in_language("zh_CN"):
        dialog = SettingsDialog(Settings(assistant_home / "settings.json"))
        qtbot.addWidget(dialog)
        assert dialog.n_threads.text() == "自动" and "其他程序繁忙时减少" in dialog.n_threads.toolTip()


def test_the_tier_lists_leave_draft_models_out(qtbot, assistant_home):
    from engine.api import load_catalog

    catalog = load_catalog()
    drafts = {e.id for e in catalog.entries if catalog.draft_only(e)}
    assert drafts  # the catalog pairs draft models with their targets
    dialog = SettingsDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    for combo in (dialog.l1, dialog.l2):
        offered = {combo.itemData(i) for i in range(combo.count())}
        assert offered and not offered & drafts
