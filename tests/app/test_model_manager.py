"""The model manager dialog: fit badges from the planner, a catalog download through a local hub
(HF_ENDPOINT on 127.0.0.1), delete, and importing a local GGUF for a tier."""

import json


from app.model_manager import ModelManagerDialog
from engine.config.settings import Settings
from tests.hub_server import HubServer

QWEN = "qwen2.5-1.5b-instruct-q4_k_m"


def test_badges_download_delete_and_import(qtbot, assistant_home, model_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    # The local hub serves the demo GGUF's bytes under the catalog's Qwen name (no network here).
    hub = HubServer({f"Qwen/Qwen2.5-1.5B-Instruct-GGUF/{QWEN}.gguf": model_paths["demo-small"]})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    settings = Settings(assistant_home / "settings.json")
    dialog = ModelManagerDialog(settings)
    qtbot.addWidget(dialog)
    try:
        assert dialog.badge(QWEN) in ("runs on the CPU", "fits on the GPU", "partly on the GPU")
        assert "RAM" in dialog.table.item(2, 4).text()
        assert dialog.status(QWEN) == "not downloaded"
        row = next(i for i, e in enumerate(dialog.entries) if e.id == QWEN)
        dialog.table.selectRow(row)
        dialog.download_selected()
        qtbot.waitUntil(lambda: dialog.status(QWEN) == "downloaded", timeout=60_000)
        assert dialog.message.text() == "Downloaded."
        assert (tmp_path / "models" / f"{QWEN}.gguf").read_bytes() == model_paths["demo-small"].read_bytes()
        dialog.use_selected("L1")
        assert json.loads((assistant_home / "settings.json").read_text())["tier.L1"] == QWEN
        dialog.delete_selected(confirmed=True)
        assert dialog.status(QWEN) == "not downloaded"
        # Import: a real GGUF is accepted for a tier, anything else is refused with the reason.
        bad = tmp_path / "notes.gguf"
        bad.write_text("hello")
        assert not dialog.import_file(str(bad)) and "Not a usable model" in dialog.message.text()
        assert dialog.import_file(str(model_paths["demo-int4"]), tier="L2")
        assert "gemma3" in dialog.message.text()
        assert Settings(assistant_home / "settings.json").get("tier.L2") == str(model_paths["demo-int4"].resolve())
    finally:
        dialog.done(0)
        hub.stop()


def test_a_model_with_a_draft_downloads_it_too_and_the_draft_is_never_a_tier(qtbot, assistant_home, model_paths,
                                                                            tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    target, draft = "qwen2.5-7b-instruct-q4_k_m", "qwen2.5-0.5b-instruct"
    hub = HubServer({"bartowski/Qwen2.5-7B-Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf": model_paths["demo-small"],
                     "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf": model_paths["demo-small"]})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    settings = Settings(assistant_home / "settings.json")
    dialog = ModelManagerDialog(settings)
    qtbot.addWidget(dialog)
    row = {e.id: i for i, e in enumerate(dialog.entries)}
    try:
        # The pair shows: the target's name says it has a draft, the draft's tier says what it is.
        assert dialog.table.item(row[target], 0).text() == \
            "Qwen2.5 7B Instruct Q4_K_M · with 0.5B draft (faster answers)"
        assert dialog.table.item(row[draft], 1).text() == "draft"
        assert "Qwen2.5 7B Instruct Q4_K_M checks them" in dialog.table.item(row[draft], 0).toolTip()
        # One Download fetches the model, then its draft.
        dialog.table.selectRow(row[target])
        dialog.download_selected()
        qtbot.waitUntil(lambda: dialog.message.text() == "Downloaded.", timeout=60_000)
        assert dialog.status(target) == dialog.status(draft) == "downloaded"
        fetched = "/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_k_m.gguf"
        assert ("GET", fetched) in hub.requests
        # The draft alone: the tier buttons are off, and asking anyway says why.
        dialog.table.selectRow(row[draft])
        assert not dialog.use_l1.isEnabled() and not dialog.use_l2.isEnabled()
        dialog.use_selected("L2")
        assert dialog.message.text() == ("Qwen2.5 0.5B Instruct is a draft model: it makes Qwen2.5 7B Instruct Q4_K_M "
                                         "answer faster and is not offered as a tier.")
        assert settings.get("tier.L2") != draft
        # Deleted, the draft comes back with Download on its model, which is still there.
        dialog.delete_selected(confirmed=True)
        assert dialog.status(draft) == "not downloaded" and dialog.status(target) == "downloaded"
        dialog.table.selectRow(row[target])
        assert dialog.use_l1.isEnabled()
        dialog.download_selected()
        qtbot.waitUntil(lambda: dialog.status(draft) == "downloaded", timeout=60_000)
    finally:
        dialog.done(0)
        hub.stop()


def test_a_vision_model_downloads_with_its_projector_and_deletes_with_it(qtbot, assistant_home, tmp_path, monkeypatch):
    """Issue 41: the row says it reads images; one Download fetches the model and its projector (the
    synthetic pair under the catalog's names), which then resolve together; Delete takes both."""
    from engine.models.catalog import resolve_model
    from tests import vision_model as vm

    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    vlm = "smolvlm2-256m-video-instruct"
    model, mmproj = vm.vision_pair()
    repo = "ggml-org/SmolVLM2-256M-Video-Instruct-GGUF"
    hub = HubServer({f"{repo}/SmolVLM2-256M-Video-Instruct-Q8_0.gguf": model,
                     f"{repo}/mmproj-SmolVLM2-256M-Video-Instruct-Q8_0.gguf": mmproj})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    dialog = ModelManagerDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    row = {e.id: i for i, e in enumerate(dialog.entries)}[vlm]
    try:
        assert dialog.table.item(row, 0).text() == "SmolVLM2 256M · reads images"
        dialog.table.selectRow(row)
        dialog.download_selected()
        qtbot.waitUntil(lambda: dialog.message.text() == "Downloaded.", timeout=60_000)
        projector = tmp_path / "models" / "mmproj-SmolVLM2-256M-Video-Instruct-Q8_0.gguf"
        assert projector.read_bytes() == mmproj.read_bytes() and resolve_model(vlm).projector == projector
        dialog.delete_selected(confirmed=True)
        assert dialog.status(vlm) == "not downloaded" and not projector.exists()
    finally:
        dialog.done(0)
        hub.stop()
