"""The GPU check kit's parts that need no GPU and no llama.cpp build (fast):

    .venv/bin/python -m pytest packaging/gpu_kit/test_kit.py

Skeleton -> synthesised GGUF keeps the tensor table and size; the payload's archives and library
aliases round-trip; the report renders to markdown from full, partial and empty reports. The whole
kit (workers included) is tested by running gpu_check.py against lavapipe (docs/gpu.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

KIT = Path(__file__).resolve().parent
sys.path.insert(0, str(KIT))

import gpu_check  # noqa: E402
import pack  # noqa: E402
import report_table  # noqa: E402
import synth  # noqa: E402
from engine.models.gguf_info import read_gguf  # noqa: E402

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K"]


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    """A small GGUF with a tokenizer-like array and one tensor of each quantised type."""
    path = tmp_path / "tiny.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(3000)])
    w.add_tensor("blk.0.attn_norm.weight", np.full(256, 3.0, np.float32))
    rng = np.random.default_rng(1)
    for name in TYPES:
        qtype = GGMLQuantizationType[name]
        per_block, block_bytes = GGML_QUANT_SIZES[qtype]
        rows, row_bytes = 4, 512 // per_block * block_bytes
        raw = rng.integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)
        w.add_tensor(f"blk.0.{name.lower()}.weight", raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_skeleton_round_trip_keeps_table_and_size(tiny_gguf: Path, tmp_path: Path):
    entry = synth.make_skeleton(tiny_gguf, tmp_path / "tiny.skel.xz")
    assert entry["skeleton_bytes"] < entry["header_bytes"]  # compressed
    out = tmp_path / "made" / "tiny.gguf"
    synth.synthesize(tmp_path / "tiny.skel.xz", out, entry, seed=3)
    a, b = read_gguf(tiny_gguf), read_gguf(out)
    assert b.file_size == a.file_size == entry["file_size"]
    assert [(t.name, t.shape, t.type_id, t.offset) for t in b.tensors] == \
           [(t.name, t.shape, t.type_id, t.offset) for t in a.tensors]
    assert b.metadata["tokenizer.ggml.tokens"] == a.metadata["tokenizer.ggml.tokens"]
    start = synth.data_start(b)
    data = out.read_bytes()
    norm = next(t for t in b.tensors if t.name.endswith("attn_norm.weight"))
    assert np.all(np.frombuffer(data, np.float32, norm.n_elements, start + norm.offset) == 1.0)
    for t in b.tensors:
        if t.type_id in synth._QUANT:
            block, fields, _ = synth._QUANT[t.type_id]
            blocks = np.frombuffer(data, np.uint8, t.nbytes, start + t.offset).reshape(-1, block)
            for offset, _ in fields:  # every scale a finite, small f16
                scales = blocks[:, offset:offset + 2].copy().view(np.float16)
                assert np.all(np.isfinite(scales)) and np.all(np.abs(scales) < 1), t.name


def test_synthesis_is_deterministic_and_checks_the_header(tiny_gguf: Path, tmp_path: Path):
    entry = synth.make_skeleton(tiny_gguf, tmp_path / "s.xz")
    one, two = tmp_path / "1.gguf", tmp_path / "2.gguf"
    synth.synthesize(tmp_path / "s.xz", one, entry)
    synth.synthesize(tmp_path / "s.xz", two, entry)
    assert hashlib.sha256(one.read_bytes()).digest() == hashlib.sha256(two.read_bytes()).digest()
    with pytest.raises(synth.SkeletonError):
        synth.synthesize(tmp_path / "s.xz", tmp_path / "3.gguf", entry | {"header_sha256": "0" * 64})


def test_llama_archive_keeps_one_copy_and_links_aliases(tmp_path: Path):
    wheel = tmp_path / "llama_cpp_python-0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llama_cpp/__init__.py", "")
        for name in ("libllama.so", "libllama.so.0", "libllama.so.0.5.0"):
            zf.writestr(f"llama_cpp/lib/{name}", b"LLAMA")
        zf.writestr("llama_cpp/lib/libggml-vulkan.so", b"VK")
        zf.writestr("llama_cpp/lib/libggml-cpu-haswell.so", b"CPU")
        zf.writestr("llama_cpp/lib/libmtmd.so", b"MTMD")
    libs = pack.pack_llama(wheel, tmp_path)
    assert libs["libllama.so"]["aliases"] == ["libllama.so.0", "libllama.so.0.5.0"]
    assert {n: v["role"] for n, v in libs.items()} == {"libllama.so": "core", "libggml-vulkan.so": "vulkan",
                                                        "libggml-cpu-haswell.so": "cpu"}
    work = tmp_path / "work"
    gpu_check.untar(tmp_path / "llama_cpp.tar.xz", work / "llama")
    check = gpu_check.Check.__new__(gpu_check.Check)
    check.work, check.manifest = work, {"libs": libs}
    pkg = check.package("cpu", ["libllama.so", "libggml-cpu-haswell.so"]) / "llama_cpp"
    assert sorted(os.listdir(pkg / "lib")) == ["libggml-cpu-haswell.so", "libllama.so", "libllama.so.0",
                                               "libllama.so.0.5.0"]
    assert os.readlink(pkg / "lib" / "libllama.so.0") == "libllama.so"
    assert (pkg / "__init__.py").exists()


def _report() -> dict:
    speed = lambda tps, greedy: {"prompts": {"long": {"tokens": 100, "prompt_tps": tps, "decode_tps": tps / 10,  # noqa: E731
                                                      "greedy": greedy}}}
    cpu = {"device": None, "registry": {"cpu_module": "/x/libggml-cpu-zen4.so"},
           "models": {"demo-small": {"speed": speed(500, [1, 2, 3, 4])}}}
    vk_speed = speed(5000, [1, 2, 9, 4]) | {"logits_vs_cpu": {"long": {"max_abs_diff": 0.01, "cpu_logit_std": 1.0}}}
    vram = [{"case": "full", "plan": {"offload": "full", "n_gpu_layers": 31, "n_layers": 31, "n_ctx": 4096,
                                      "type_k": "f16", "flash_attn": False, "gpu_bytes": 200 << 20},
             "logged_on_device": {"total": 190 << 20}, "plan_vs_logged": 0.0526, "nvml_delta_after_eval": 300 << 20,
             "plan_vs_nvml": -0.33},
            {"case": "budget of 15/31 layers", "skipped": "deadline"}]
    kv = {"warm": [{"restored_from": "warm", "restored_tokens": 2000, "restore_ms": 3.0, "park_ms": 2.0,
                    "evaluated": 32, "new_tokens": 32, "scratch_eval_ms": 40.0, "matches_scratch": True}],
          "cold": [], "cold_write_ms": 12.0}
    vk = {"device": {"name": "Vulkan0", "description": "NVIDIA H200 (NVIDIA)", "software": False},
          "models": {"demo-small": {"speed": vk_speed, "vram": vram, "kv": kv}}, "errors": []}
    return {"machine": {"cpu": "Xeon", "cores": 16, "python": "3.12.3"}, "profile": "full", "elapsed_s": 300,
            "budget_s": 560, "backends": {"cpu": cpu, "vulkan": vk, "cuda": {"skipped": "not built by its deadline"}},
            "parts": {"cuda_build": {"status": "timeout", "reason": "not built by its deadline ((80, 156) steps done)"}},
            "notes": []}


def test_report_renders_speed_vram_kv_and_what_failed():
    text = report_table.render(_report())
    assert "| demo-small | CPU (zen4) | 100 (long) | 500 | 50.0 | (reference) | — |" in text
    assert "| demo-small | Vulkan0 (NVIDIA H200) | 100 (long) | 5000 | 500.0 | 2/4 (differs at 2) | 0.01 / 1 |" in text
    assert "+5.3 %" in text and "-33.0 %" in text and "deadline" in text
    assert "| 2000 | 3.0 | 2.0 |" in text and "32/32 | yes |" in text
    assert "CUDA build: timeout: not built by its deadline" in text
    assert "cuda: not built by its deadline" in text


def test_report_renders_an_empty_or_broken_run():
    assert "Speed" in report_table.render({})
    assert "Stopped early: OSError: boom" in report_table.render({"fatal": "OSError: boom"})
    json.dumps(_report())  # the fixture is what gpu_check writes: plain JSON
