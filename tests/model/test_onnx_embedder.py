"""The embedder on ONNX Runtime gives sentence-transformers' vectors; a stale export is never used."""

import json
import shutil

import numpy as np

from engine.memory import DEFAULT_MODEL, Embedder
from engine.memory.embedder import bundled_model_dir
from engine.memory.onnx_encoder import RUN_TOKENS, onnx_path, usable_export

TEXTS = ["Who fixed the broken window?", "我的猫叫米索，今年三岁。", "مرحبا", "🙂" * 50, "tax " * 400, "x"]


def test_onnx_and_torch_give_the_same_vectors(model_paths):
    assert usable_export(DEFAULT_MODEL.id, bundled_model_dir()), "run `make models` (exports the embedder)"
    onnx, torch = Embedder(runtime="onnx").start(), Embedder(runtime="torch").start()
    assert onnx.wait(120) and torch.wait(300), (onnx.state, torch.state)
    assert (onnx.runtime_used, torch.runtime_used) == ("onnx", "torch")
    a, b = onnx.embed(TEXTS), torch.embed(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384)
    assert float(np.abs(a - b).max()) < 1e-5
    # Batches are padded per batch: a text embeds the same alone as beside a long one.
    assert float(np.abs(onnx.embed([TEXTS[0]])[0] - a[0]).max()) < 1e-5
    assert onnx.count_tokens(TEXTS) == torch.count_tokens(TEXTS)  # both cut at 256, [CLS] and [SEP] counted


def test_an_export_of_other_weights_or_a_damaged_sidecar_is_not_used(tmp_path, monkeypatch):
    src = bundled_model_dir()
    assert usable_export(DEFAULT_MODEL.id, src)
    sidecar = onnx_path(DEFAULT_MODEL.id).with_suffix(".json")
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"not the same weights")
    assert usable_export(DEFAULT_MODEL.id, other) is None
    # Same bytes under a new mtime (a reinstall) still match, through the digest.
    same = tmp_path / "same"
    same.mkdir()
    shutil.copy(src / "model.safetensors", same / "model.safetensors")
    assert usable_export(DEFAULT_MODEL.id, same) is not None
    # A damaged sidecar: the export is ignored (and the torch path would load and export again).
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    (tmp_path / "models" / "embedders").mkdir(parents=True)
    shutil.copy(sidecar.with_suffix(".onnx"), onnx_path(DEFAULT_MODEL.id))
    onnx_path(DEFAULT_MODEL.id).with_suffix(".json").write_text("{not json")
    assert usable_export(DEFAULT_MODEL.id, src) is None
    onnx_path(DEFAULT_MODEL.id).with_suffix(".json").write_text(json.dumps({"weights_sha256": "0" * 64}))
    assert usable_export(DEFAULT_MODEL.id, src) is None
    failed = Embedder(runtime="onnx").start()
    assert not failed.wait(30) and "no ONNX export" in failed.state


def test_many_long_texts_run_in_pieces_with_the_vectors_of_single_runs(model_paths):
    onnx = Embedder(runtime="onnx").start()
    assert onnx.wait(120), onnx.state
    try:
        texts = ["tax " * 400, "x", "我的猫叫米索。" * 60, "Who fixed the broken window?"] * 6
        counts = onnx.count_tokens(texts)
        assert counts[:4] == [256, 3, 256, 8]  # cut at the model's 256
        assert len(texts) * max(counts) > 2 * RUN_TOKENS  # padded to 256: three runs of the graph at least
        together = onnx.embed(texts)
        alone = np.stack([onnx.embed([t])[0] for t in texts[:4]] * 6)
        assert float(np.abs(together - alone).max()) < 1e-5
    finally:
        onnx.close()
