"""The model manager's hub search against local fake hubs: GGUF repositories with a file per quant,
sizes and fit badges, a split model marked unsupported, a download of a result and using it for a
tier; the catalog table names a demo once."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from app.model_manager import RESULT_COLUMNS, ModelManagerDialog
from engine.config.settings import Settings
from tests.hub_server import HubServer, ModelScopeServer, write_tiny_gguf

BADGES = ("fits on the GPU", "runs on the CPU", "partly on the GPU", "too big for free RAM")


def cell(dialog, row, column):
    return dialog.result_table.item(row, RESULT_COLUMNS.index(column)).text()


def files_for(tmp_path, model_paths, owner="tester"):
    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    return {f"{owner}/Smol-Instruct-GGUF/smol-instruct-q4_1.gguf": model_paths["demo-small"],
            f"{owner}/Smol-Instruct-GGUF/smol-instruct-q8_0.gguf": tiny,
            f"{owner}/Big-Instruct-GGUF/big-instruct-q4_k_m-00001-of-00002.gguf": tiny,
            f"{owner}/Big-Instruct-GGUF/big-instruct-q4_k_m-00002-of-00002.gguf": tiny,
            "someone/unrelated/readme.gguf": tiny}


def test_search_lists_quants_with_badges_and_downloads_a_result(qtbot, assistant_home, model_paths, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    hub = HubServer(files_for(tmp_path, model_paths), meta={"tester/Smol-Instruct-GGUF": {"downloads": 10}})
    monkeypatch.setenv("ASSISTANT_HUB_HUGGINGFACE", hub.url)
    settings = Settings(assistant_home / "settings.json")
    dialog = ModelManagerDialog(settings)
    qtbot.addWidget(dialog)
    try:
        combo = dialog.findChild(QWidget, "hubEndpoint")
        combo.setCurrentIndex(combo.findData("huggingface"))
        dialog.findChild(QWidget, "hubSearchBox").setText("instruct")
        dialog.search()
        qtbot.waitUntil(lambda: dialog.result_table.rowCount() > 0, timeout=30_000)
        rows = {cell(dialog, r, "File"): r for r in range(dialog.result_table.rowCount())}
        assert set(rows) == {"smol-instruct-q4_1.gguf", "smol-instruct-q8_0.gguf",
                             "big-instruct-q4_k_m-00001-of-00002.gguf"}  # "unrelated" does not match
        q41, q8, split = (rows[n] for n in ("smol-instruct-q4_1.gguf", "smol-instruct-q8_0.gguf",
                                            "big-instruct-q4_k_m-00001-of-00002.gguf"))
        assert (cell(dialog, q41, "Quant"), cell(dialog, q8, "Quant"), cell(dialog, split, "Quant")) == \
            ("Q4_1", "Q8_0", "Q4_K_M")
        assert cell(dialog, q41, "Size") == f"{model_paths['demo-small'].stat().st_size / 1e6:,.0f} MB"
        assert cell(dialog, q41, "On this machine") in BADGES and cell(dialog, q8, "On this machine") in BADGES
        assert cell(dialog, split, "On this machine") == "split file: not supported"
        assert cell(dialog, q41, "Status") == "not downloaded" and cell(dialog, q41, "Repository") == \
            "tester/Smol-Instruct-GGUF"
        assert dialog.message.text() == "3 files found."
        # download the Q4_1 file, then make it L2's model
        dialog.result_table.selectRow(q41)
        dialog.use_result("L2")
        assert dialog.message.text() == "Download the file first."
        qtbot.mouseClick(dialog.findChild(QWidget, "downloadResult"), Qt.LeftButton)
        qtbot.waitUntil(lambda: cell(dialog, q41, "Status") == "downloaded", timeout=60_000)
        path = tmp_path / "models" / "smol-instruct-q4_1.gguf"
        assert path.read_bytes() == model_paths["demo-small"].read_bytes()
        assert dialog.message.text() == "Downloaded."
        dialog.use_result("L2")
        assert Settings(assistant_home / "settings.json").get("tier.L2") == str(path.resolve())
        # a split result is refused with the reason
        dialog.result_table.selectRow(split)
        dialog.download_result()
        assert "split into 2 files" in dialog.message.text()
    finally:
        dialog.done(0)
        hub.stop()


def test_modelscope_search_and_an_unreachable_hub(qtbot, assistant_home, model_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    ms = ModelScopeServer(files_for(tmp_path, model_paths, owner="qwen"))
    monkeypatch.setenv("ASSISTANT_HUB_MODELSCOPE", ms.url)
    monkeypatch.setenv("ASSISTANT_HUB_HUGGINGFACE", "http://127.0.0.1:9")  # nothing listens there
    dialog = ModelManagerDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    try:
        dialog.hub.setCurrentIndex(dialog.hub.findData("modelscope"))
        dialog.search("smol")
        qtbot.waitUntil(lambda: dialog.result_table.rowCount() == 2, timeout=30_000)
        dialog.result_table.selectRow(next(r for r in range(2) if cell(dialog, r, "Quant") == "Q4_1"))
        dialog.download_result()
        qtbot.waitUntil(lambda: (tmp_path / "models" / "smol-instruct-q4_1.gguf").exists(), timeout=60_000)
        qtbot.waitUntil(lambda: dialog.search_button.isEnabled())
        dialog.hub.setCurrentIndex(dialog.hub.findData("huggingface"))
        dialog.search("smol")
        qtbot.waitUntil(lambda: dialog.message.text().startswith("Search failed: "), timeout=60_000)
        assert "cannot reach" in dialog.message.text() and "Error" not in dialog.message.text()
    finally:
        dialog.done(0)
        ms.stop()


def test_a_demo_is_named_demo_once(qtbot, assistant_home):
    dialog = ModelManagerDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    try:
        names = [dialog.table.item(r, 0).text() for r in range(dialog.table.rowCount())]
        demos = [n for n, e in zip(names, dialog.entries) if e.demo]
        assert demos and all(n.count("(demo") == 1 for n in demos), demos
    finally:
        dialog.done(0)

