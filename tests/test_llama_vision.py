"""The seam's mtmd half (engine/inference/llama_vision.py) pinned to llama-cpp-python's mtmd
bindings: each function it calls, with its argument count, and the struct fields it sets, so a
wheel upgrade that changes one fails here by name (as tests/test_llama_seam.py does for llama.h)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.inference import llama_seam

VISION = Path(__file__).resolve().parents[1] / "engine" / "inference" / "llama_vision.py"
FUNCTIONS = {  # name: number of arguments
    "mtmd_bitmap_free": 1, "mtmd_bitmap_init": 3, "mtmd_bitmap_set_id": 2, "mtmd_context_params_default": 0,
    "mtmd_decode_use_mrope": 1, "mtmd_default_marker": 0, "mtmd_encode_chunk": 2, "mtmd_free": 1,
    "mtmd_get_output_embd": 1, "mtmd_helper_decode_image_chunk": 10, "mtmd_init_from_file": 3,
    "mtmd_input_chunk_get_id": 1, "mtmd_input_chunk_get_n_pos": 1, "mtmd_input_chunk_get_n_tokens": 1,
    "mtmd_input_chunk_get_tokens_text": 2, "mtmd_input_chunk_get_type": 1, "mtmd_input_chunks_free": 1,
    "mtmd_input_chunks_get": 2, "mtmd_input_chunks_init": 0, "mtmd_input_chunks_size": 1,
    "mtmd_support_vision": 1, "mtmd_tokenize": 5, "mtmd_log_set": 2, "mtmd_helper_log_set": 2,
}
TYPES = {"mtmd_bitmap_p_ctypes", "mtmd_helper_post_decode_callback"}
STRUCTS = {"mtmd_context_params": {"use_gpu", "n_threads", "print_timings", "warmup"},
           "mtmd_input_text": {"text", "text_len", "add_special", "parse_special"}}


@pytest.fixture(scope="module")
def M():
    try:
        return llama_seam.mtmd()
    except llama_seam.LoadFailed as exc:
        pytest.fail(f"the wheel has no libmtmd (packaging/llama/build_wheel.py builds it): {exc}")


def test_every_use_has_a_contract():
    used = set()
    for node in ast.walk(ast.parse(VISION.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("M", "_M"):
            used.add(node.attr)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "_M":
            used.add(node.attr)
    # mtmd_context_params comes from mtmd_context_params_default; mtmd_input_text is built by name
    assert used == set(FUNCTIONS) | TYPES | {"mtmd_input_text"}, "add or drop contract rows"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_binding(M, name):
    fn = getattr(M, name, None)
    assert fn is not None, f"mtmd_cpp.{name} is gone"
    assert len(fn.argtypes or []) == FUNCTIONS[name], f"{name}: {len(fn.argtypes or [])} arguments"


def test_structs_and_types(M):
    for struct, fields in STRUCTS.items():
        have = [f[0] for f in getattr(M, struct)._fields_]
        assert fields <= set(have), f"{struct} lost {fields - set(have)}"
    assert [f[0] for f in M.mtmd_input_text._fields_] == ["text", "text_len", "add_special", "parse_special"]
    for name in TYPES:
        assert getattr(M, name, None) is not None
