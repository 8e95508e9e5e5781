import struct

import pytest

from engine.models.catalog import ModelNotFound, load_catalog, resolve_model
from engine.models.gguf_info import GGUFError, read_gguf


def _gguf_bytes(kv: dict, tensors: list[tuple[str, int]] = ()) -> bytes:
    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for k, v in kv.items():
        out += s(k) + (struct.pack("<I", 8) + s(v) if isinstance(v, str) else struct.pack("<II", 4, v))
    for name, offset in tensors:
        out += s(name) + struct.pack("<I", 1) + struct.pack("<Q", 16) + struct.pack("<I", 0) + struct.pack("<Q", offset)
    return out


def test_reads_metadata(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(_gguf_bytes({"general.architecture": "llama", "llama.block_count": 2}) + b"\0" * 64)
    info = read_gguf(p)
    assert info.arch == "llama" and info.arch_value("block_count") == 2


def test_text_file_renamed_is_rejected(tmp_path):
    p = tmp_path / "notes.gguf"
    p.write_text("just some notes\n")
    with pytest.raises(GGUFError, match="not a GGUF"):
        read_gguf(p)


def test_truncated_tensor_data_is_detected(tmp_path):
    p = tmp_path / "cut.gguf"
    p.write_bytes(_gguf_bytes({"general.architecture": "llama"}, [("w", 1_000_000)]) + b"\0" * 100)
    with pytest.raises(GGUFError, match="truncated"):
        read_gguf(p)


def test_truncated_header_is_detected(tmp_path):
    p = tmp_path / "cut.gguf"
    p.write_bytes(_gguf_bytes({"general.architecture": "llama"})[:20])
    with pytest.raises(GGUFError, match="truncated|ends inside"):
        read_gguf(p)


def test_catalog_has_demo_and_production_models():
    cat = load_catalog()
    ids = {e.id for e in cat.entries}
    assert {"demo-small", "demo-int4", "qwen2.5-1.5b-instruct-q4_k_m", "qwen2.5-7b-instruct-q4_k_m"} <= ids
    gemma = cat.get("demo-int4")
    assert gemma.n_kv_heads == 1 and gemma.n_heads == 4 and gemma.chat_template == "gemma"
    for e in cat.entries:
        assert e.n_layers and e.n_kv_heads and e.head_dim_k and e.context_length and e.file


def test_resolve_errors_are_clear(tmp_path):
    with pytest.raises(ModelNotFound, match="unknown model 'nope'"):
        resolve_model("nope")
    with pytest.raises(ModelNotFound, match="not found"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelNotFound, match="not downloaded"):
        resolve_model("qwen2.5-7b-instruct-q4_k_m")
