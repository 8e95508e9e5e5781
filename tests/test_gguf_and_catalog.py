import os
import struct
import time

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


def _with_vocab(tokens: list[str], after: str = "after the vocabulary") -> bytes:
    """A header whose token list (a string array too long to keep) is followed by one more key."""
    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, 3) + s("general.architecture") + struct.pack("<I", 8) + s("llama")
    out += s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(s(t) for t in tokens)
    return out + s("general.name") + struct.pack("<I", 8) + s(after)


@pytest.mark.parametrize("chunk", [16, 1000, 1 << 20])
def test_a_long_string_array_is_walked_across_chunks(tmp_path, monkeypatch, chunk):
    """Strings shorter and longer than a chunk, and lengths split across two: what follows the
    array is read exactly."""
    monkeypatch.setattr("engine.models.gguf_info._CHUNK", chunk)
    tokens = [("ab" * (k % 37)) + "日本" * (k % 5) + "x" * (3000 if k % 501 == 0 else 0) for k in range(5000)]
    p = tmp_path / "vocab.gguf"
    p.write_bytes(_with_vocab(tokens) + b"\0" * 64)
    info = read_gguf(p)
    assert info.metadata["tokenizer.ggml.tokens"].length == 5000
    assert info.metadata["general.name"] == "after the vocabulary"


def test_a_string_array_cut_short_or_with_an_absurd_length_is_refused(tmp_path):
    whole = _with_vocab([f"token{k}" for k in range(3000)])
    p = tmp_path / "cut.gguf"
    p.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(GGUFError, match="ends inside"):
        read_gguf(p)
    at = whole.index(b"token1000") - 8  # one string's length says a petabyte
    p.write_bytes(whole[:at] + struct.pack("<Q", 1 << 50) + whole[at + 8:])
    with pytest.raises(GGUFError, match="corrupt metadata string length"):
        read_gguf(p)


def test_a_file_read_again_unchanged_is_not_parsed_again_and_a_changed_one_is(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(_with_vocab(["a"] * 2000, "first") + b"\0" * 64)
    os.utime(p, ns=(time.time_ns() - 10**10,) * 2)  # written ten seconds ago
    first = read_gguf(p)
    assert read_gguf(str(p)) is first
    p.write_bytes(_with_vocab(["a"] * 2000, "second, longer") + b"\0" * 64)
    again = read_gguf(p)
    assert again is not first and again.metadata["general.name"] == "second, longer"


def test_a_file_just_written_is_read_each_time(tmp_path):
    """File times tick coarsely: a rewrite in place at the same size within a tick keeps the mtime,
    so what was modified in the last two seconds is parsed again."""
    p = tmp_path / "m.gguf"
    p.write_bytes(_with_vocab(["a"] * 2000, "first") + b"\0" * 64)
    stamp = p.stat().st_mtime_ns
    assert read_gguf(p).metadata["general.name"] == "first"
    p.write_bytes(_with_vocab(["a"] * 2000, "other") + b"\0" * 64)  # the same size
    os.utime(p, ns=(stamp, stamp))  # and, as within one tick, the same time
    assert read_gguf(p).metadata["general.name"] == "other"


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
