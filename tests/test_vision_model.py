"""The synthetic SmolVLM pair (tests/vision_model.py) runs through llama.cpp's mtmd end to end.

Straight on llama-cpp-python's ctypes bindings (llama_cpp and llama_cpp.mtmd_cpp), so that what
this checks is the pair and mtmd, not the engine: the mmproj loads against the text model (widths
agree), an image tokenizes into idefics3's tiles with every marker a real token, each image chunk
encodes to n_tokens x n_embd finite embeddings, and those decode into the text model's cache,
followed by text, to finite logits; mtmd's own helper, evaluating the same chunks, agrees.
CPU only, one thread.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tests import vision_model as vm

pytestmark = pytest.mark.model
# One thread, not tests/model/helpers.py's 2: these graphs are ~100 nodes of microseconds each, and
# two threads meet at a barrier after every node. On a 2-core runner where anything else is busy,
# one of the two waits out a scheduler slice per node: measured here, an image tile's encode went
# from 1 ms to 360 ms and the whole test from 0.03 s to 9 s; with one thread it stays at 0.03 s.
THREADS = 1
N_CTX = 512
TEXT, IMAGE = 0, 1  # enum mtmd_input_chunk_type


@pytest.fixture(scope="module")
def vlm(model_paths):
    """(llama_cpp, mtmd_cpp, model, mtmd context); model_paths fails the test without the donor."""
    from engine.inference import llama_seam

    llama_seam.init()  # ggml's backends are modules (GGML_BACKEND_DL): the repo's registry loads them
    import llama_cpp as C
    from llama_cpp import mtmd_cpp as M

    model_path, mmproj_path = vm.vision_pair()
    mp = C.llama_model_default_params()
    mp.n_gpu_layers = 0
    # an empty, NULL-terminated device list keeps every layer and every big batch on the CPU, as
    # llama_seam.Model(devices=[]) does (tests/conftest.py shows lavapipe to llama.cpp as a GPU)
    no_devices = (ctypes.c_void_p * 1)(None)
    mp.devices = ctypes.cast(no_devices, ctypes.c_void_p)
    model = C.llama_model_load_from_file(str(model_path).encode(), mp)
    assert model, "llama.cpp could not load the synthetic text model"
    cp = M.mtmd_context_params_default()
    cp.use_gpu, cp.n_threads, cp.print_timings = False, THREADS, False
    mctx = M.mtmd_init_from_file(str(mmproj_path).encode(), model, cp)
    assert mctx, "mtmd could not load the synthetic mmproj"
    yield C, M, model, mctx
    M.mtmd_free(mctx)  # before the model: it keeps the model's vocabulary
    C.llama_model_free(model)


def gradient(nx: int, ny: int) -> bytes:
    """An RGB gradient (RGBRGB..., row-major), different in every tile and the overview."""
    x, y = np.meshgrid(np.linspace(0, 255, nx), np.linspace(0, 255, ny))
    return np.stack([x, y, 255 - (x + y) / 2], axis=-1).astype(np.uint8).tobytes()


def tokenize(C, M, mctx, text: str, nx: int, ny: int):
    """mtmd_tokenize `text` (one media marker) with an nx x ny gradient: the chunks (the caller
    frees them with mtmd_input_chunks_free). The bitmap is freed here: tokenizing has already
    preprocessed it into the image chunks."""
    data = (ctypes.c_uint8 * (nx * ny * 3)).from_buffer_copy(gradient(nx, ny))
    bitmap = M.mtmd_bitmap_init(nx, ny, data)
    assert bitmap
    raw = text.encode()
    inp = M.mtmd_input_text(text=raw, text_len=len(raw), add_special=True, parse_special=True)
    chunks = M.mtmd_input_chunks_init()
    try:
        bitmaps = (M.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert M.mtmd_tokenize(mctx, chunks, ctypes.byref(inp), bitmaps, 1) == 0
    except BaseException:
        M.mtmd_input_chunks_free(chunks)
        raise
    finally:
        M.mtmd_bitmap_free(bitmap)
    return chunks


def walk(M, chunks) -> list[tuple[int, object, int, int, list[int]]]:
    """(kind, chunk, n_tokens, n_pos, text token ids) of each chunk; the chunk pointers belong
    to `chunks` (never freed one by one)."""
    out = []
    for i in range(M.mtmd_input_chunks_size(chunks)):
        chunk = M.mtmd_input_chunks_get(chunks, i)
        kind = M.mtmd_input_chunk_get_type(chunk)
        ids: list[int] = []
        if kind == TEXT:
            n = ctypes.c_size_t(0)
            ptr = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            ids = [ptr[j] for j in range(n.value)]
        out.append((kind, chunk, M.mtmd_input_chunk_get_n_tokens(chunk), M.mtmd_input_chunk_get_n_pos(chunk), ids))
    return out


def pieces(C, model, ids: list[int]) -> list[str]:
    vocab = C.llama_model_get_vocab(model)
    return [C.llama_vocab_get_text(vocab, t).decode() for t in ids]


def expected_layout(cols: int, rows: int) -> list[str | int]:
    """What mtmd.cpp writes for PROJECTOR_TYPE_IDEFICS3 (as transformers' Idefics3Processor):
    each tile after <fake_token_around_image><row_R_col_C>, a newline after each row but the last,
    then the overview after "\\n\\n"<fake_token_around_image><global-img>, closed by
    <fake_token_around_image>. Text as vocabulary pieces ("Ċ" is "\\n"); an int is an image chunk."""
    out: list[str | int] = []
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            out += ["<fake_token_around_image>", f"<row_{r}_col_{c}>", 1]
        if r < rows:
            out.append("Ċ")
    return out + ["ĊĊ", "<fake_token_around_image>", "<global-img>", 1, "<fake_token_around_image>"]


# the longer side is resized to 256 px whatever the size, so only the shape counts: less elongated
# than 2:1 is 2x2 tiles of 128 px, a 2:1 or longer strip 2x1 (each + the overview)
@pytest.mark.parametrize("nx, ny, cols, rows", [(100, 80, 2, 2), (640, 480, 2, 2), (300, 60, 2, 1)])
def test_image_tokenizes_into_idefics3_tiles(vlm, nx, ny, cols, rows):
    C, M, model, mctx = vlm
    assert M.mtmd_support_vision(mctx)
    marker = M.mtmd_default_marker().decode()
    chunks = tokenize(C, M, mctx, f"Look:{marker}", nx, ny)
    try:
        parts = walk(M, chunks)
        n_vocab = C.llama_vocab_n_tokens(C.llama_model_get_vocab(model))
        layout: list[str | int] = []
        for kind, chunk, n_tokens, n_pos, ids in parts:
            if kind == IMAGE:
                # 128 px tile, 16 px patches, pixel shuffle by 4: (128/16/4)^2 embeddings, 1 position each
                assert (n_tokens, n_pos) == (4, 4)
                assert not M.mtmd_decode_use_non_causal(mctx, chunk)
                layout.append(1)
            else:
                assert n_tokens == len(ids) and all(0 <= t < n_vocab for t in ids)  # no LLAMA_TOKEN_NULL
                layout += pieces(C, model, ids)
        assert layout[:2] == ["Look", ":"]
        assert layout[2:] == expected_layout(cols, rows)
        n_text = sum(1 for p in layout if p != 1)  # "Look:" and the markers: 2 + 13 for 2x2
        assert M.mtmd_helper_get_n_tokens(chunks) == n_text + (cols * rows + 1) * 4
        assert M.mtmd_helper_get_n_pos(chunks) == M.mtmd_helper_get_n_tokens(chunks)
    finally:
        M.mtmd_input_chunks_free(chunks)


def new_context(C, model):
    p = C.llama_context_default_params()
    p.n_ctx = p.n_batch = p.n_ubatch = N_CTX
    p.n_threads = p.n_threads_batch = THREADS
    p.op_offload = False
    ctx = C.llama_init_from_model(model, p)
    assert ctx
    return ctx


def decode_embd(C, ctx, embd: np.ndarray, n_past: int) -> None:
    """Image embeddings (n_tokens x n_embd, float32) into sequence 0 at positions n_past.."""
    n, width = embd.shape
    batch = C.llama_batch_init(n, width, 1)  # embd != 0: batch.embd, no batch.token
    try:
        batch.n_tokens = n
        ctypes.memmove(batch.embd, np.ascontiguousarray(embd, dtype=np.float32).ctypes.data, embd.nbytes)
        for i in range(n):
            batch.pos[i], batch.n_seq_id[i], batch.logits[i] = n_past + i, 1, False
            batch.seq_id[i][0] = 0
        assert C.llama_decode(ctx, batch) == 0
    finally:
        C.llama_batch_free(batch)


def decode_tokens(C, ctx, ids: list[int], n_past: int, logits_last: bool) -> None:
    batch = C.llama_batch_init(len(ids), 0, 1)
    try:
        batch.n_tokens = len(ids)
        for i, t in enumerate(ids):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, n_past + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, logits_last and i == len(ids) - 1
        assert C.llama_decode(ctx, batch) == 0
    finally:
        C.llama_batch_free(batch)


def last_logits(C, ctx, model) -> np.ndarray:
    n_vocab = C.llama_vocab_n_tokens(C.llama_model_get_vocab(model))
    return np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()


def test_image_encodes_and_decodes(vlm):
    C, M, model, mctx = vlm
    assert C.llama_model_n_embd(model) == vm.N_EMBD
    marker = M.mtmd_default_marker().decode()
    chunks = tokenize(C, M, mctx, f"<|im_start|>user\n{marker}What is this?<|im_end|>\n", 100, 80)
    ctx = new_context(C, model)
    try:
        parts = walk(M, chunks)
        assert parts[-1][0] == TEXT
        n_past, images = 0, []
        for i, (kind, chunk, n_tokens, n_pos, ids) in enumerate(parts):
            if kind == IMAGE:
                assert M.mtmd_encode_chunk(mctx, chunk) == 0
                # the output belongs to mtmd and is overwritten by the next encode: copy it
                embd = np.ctypeslib.as_array(M.mtmd_get_output_embd(mctx), shape=(n_tokens * vm.N_EMBD,))
                embd = embd.reshape(n_tokens, vm.N_EMBD).copy()
                assert np.isfinite(embd).all() and embd.std() > 0
                decode_embd(C, ctx, embd, n_past)
                images.append(embd)
            else:
                decode_tokens(C, ctx, ids, n_past, logits_last=i == len(parts) - 1)
            n_past += n_pos
        assert len(images) == 5
        # every tile and the overview see different pixels: no two embeddings alike
        assert all(not np.allclose(a, b) for j, a in enumerate(images) for b in images[j + 1:])
        ours = last_logits(C, ctx, model)
        assert np.isfinite(ours).all() and ours.std() > 0

        # mtmd's helper (encode each image chunk, decode its embeddings, decode the text) agrees
        C.llama_memory_clear(C.llama_get_memory(ctx), True)
        new_n_past = C.llama_pos(0)
        assert M.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, N_CTX, True, ctypes.byref(new_n_past)) == 0
        assert new_n_past.value == n_past == M.mtmd_helper_get_n_pos(chunks)
        np.testing.assert_allclose(last_logits(C, ctx, model), ours, rtol=1e-4, atol=1e-4)
    finally:
        C.llama_free(ctx)
        M.mtmd_input_chunks_free(chunks)


def test_pair_is_reproducible(tmp_path, monkeypatch, model_paths):
    """Built again elsewhere, the pair is the same bytes (seeded per tensor name; no timestamps)."""
    import hashlib

    cached = vm.vision_pair()
    monkeypatch.setattr(vm, "CACHE", tmp_path)
    fresh = vm.vision_pair()
    assert [p.parent for p in fresh] == [tmp_path, tmp_path]
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert [digest(p) for p in fresh] == [digest(p) for p in cached], \
        "the cached pair differs from a fresh build: bump tests/vision_model.py's VERSION"
    assert not list(tmp_path.glob("*.part"))
