"""A tiny synthetic vision model pair in SmolVLM's llama.cpp architecture, made at test time.

No real vision GGUF can be downloaded here, and image support is tested on what llama.cpp's mtmd
does with a pair's shapes, not on what its weights know. So this writes, with `gguf.GGUFWriter`:

* a text model: LLaMA architecture (SmolVLM's decoder), 2 layers, width 64, with the demo model's
  tokenizer (SmolLM2, the family SmolVLM's tokenizer extends) plus the image tokens SmolVLM adds,
  so text tokenizes as it would and mtmd's idefics3 chunking finds every marker it looks up;
* an mmproj: projector type `idefics3`, as conversion/smolvlm.py writes a real SmolVLM's: a CLIP
  ViT (conv patch embedding, learned positions, pre-norm blocks with GELU, post-norm) and the
  pixel-shuffle projector `mm.model.fc`, whose output width is the text model's.

Weights are small random normals from a fixed seed per tensor name: the files are byte-identical
on every run and every machine. They are made once into ~/.cache/offline-assistant-bench/ (outside
the repo; a version tag in the name, bumped when the layout changes) and written to a temporary
file renamed into place, so a concurrent or interrupted build never leaves a half file under the
final name.

    from tests.vision_model import vision_pair
    model_path, mmproj_path = vision_pair()

What an image becomes (mtmd's idefics3 preprocessing, with `preproc_image_size` set as a real
SmolVLM's is): the image is resized so its longer side is LONGEST_EDGE (256 px), then to multiples of
IMAGE_SIZE (128 px) and cut into tiles, plus a 128 px overview of the whole. Each tile or overview
is 8x8 patches of 16 px, pixel-shuffled by 4: 4 embeddings. The image's size does not matter, only
its shape: anything less elongated than 2:1 (100x80, 640x480, 80x100, 64x64) is a 2x2 grid, 5 image
chunks of 4 tokens (4 tiles, then the overview) between text chunks holding
`<fake_token_around_image>`, `<row_R_col_C>` and `<global-img>`; a 2:1 or longer strip is 2x1.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "offline-assistant-bench"
VERSION = "v1"  # bump when anything below changes what is written
MODEL_NAME = f"synthetic-smolvlm-tiny-{VERSION}.gguf"
MMPROJ_NAME = f"mmproj-synthetic-smolvlm-tiny-{VERSION}.gguf"
DONOR = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"  # demo-small: the tokenizer's source
SEED = 20240601
STD = 0.02  # small normal init, as transformers' initializer_range: activations stay O(1)

# text model (SmolVLM's decoder is a LLaMA)
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2    # grouped-query attention, as SmolVLM's
N_FF = 128
N_CTX_TRAIN = 8192
ROPE_BASE = 100_000.0

# vision encoder + projector
IMAGE_SIZE = 128     # one tile's side (a real SmolVLM: 512)
PATCH_SIZE = 16      # SmolVLM's
SCALE_FACTOR = 4     # pixel-shuffle factor, SmolVLM's: (128/16/4)^2 = 4 embeddings per tile
LONGEST_EDGE = 256   # preprocessor's longest edge: at most a 2x2 grid of tiles (+ the overview)
V_EMBD = 32
V_HEAD = 2
V_FF = 48            # != V_EMBD: clip.cpp swaps ffn_up/ffn_down (old exports had them backwards)
                     # when ffn_down's input width equals n_embd, which n_ff == n_embd would trigger
V_LAYER = 2
V_EPS = 1e-6

# The tokens SmolVLM's tokenizer adds to SmolLM2's (appended in its order). mtmd.cpp looks up
# "<fake_token_around_image>" and "<global-img>" by text for PROJECTOR_TYPE_IDEFICS3 (and "\n\n",
# "\n", which SmolLM2 has), and writes "<row_R_col_C>" before each tile as text parsed for
# special tokens: missing, the lookups give LLAMA_TOKEN_NULL (-1) in a text chunk.
IMAGE_TOKENS = (["<global-img>"] + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
                + ["<fake_token_around_image>", "<image>", "<end_of_utterance>"])


def vision_pair() -> tuple[Path, Path]:
    """(text model path, mmproj path) of the synthetic pair, built on first use, then reused."""
    model, mmproj = CACHE / MODEL_NAME, CACHE / MMPROJ_NAME
    if model.is_file() and mmproj.is_file():
        return model, mmproj
    if not DONOR.is_file():
        raise FileNotFoundError(f"{DONOR} (the tokenizer's source) is missing: run `make models`")
    t0 = time.monotonic()
    CACHE.mkdir(parents=True, exist_ok=True)
    if not model.is_file():
        _atomic_write(model, _write_text_model)
    if not mmproj.is_file():
        _atomic_write(mmproj, _write_mmproj)
    print(f"# built the synthetic vision pair in {time.monotonic() - t0:.2f} s: {model}, {mmproj}",
          file=sys.stderr)
    return model, mmproj


def _atomic_write(dest: Path, write) -> None:
    """write(path) into a temporary name beside `dest`, then rename: readers see all or nothing,
    and two processes building at once each rename a whole (identical) file."""
    part = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    try:
        write(part)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)


def _normal(name: str, shape: tuple[int, ...], std: float = STD, dtype=np.float32) -> np.ndarray:
    """Random weights of one tensor, seeded by its name: the same bytes whatever the write order."""
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
    return (rng.standard_normal(shape, dtype=np.float32) * std).astype(dtype)


# ---- the text model ---------------------------------------------------------------------------
def _write_text_model(path: Path) -> None:
    import gguf

    tokenizer, n_vocab = _donor_tokenizer()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("synthetic SmolVLM text model (tiny, random weights)")
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    for key, vtype, value in tokenizer:
        if isinstance(vtype, tuple):  # (ARRAY, element type): the donor's element type, not a guess
            w.add_key_value(key, value, vtype[0], sub_type=vtype[1])
        else:
            w.add_key_value(key, value, vtype)

    head, kv = N_EMBD // N_HEAD, N_EMBD // N_HEAD * N_HEAD_KV
    ones = np.ones(N_EMBD, dtype=np.float32)
    # F16 for the one big matrix (tied: also the output layer), F32 elsewhere (exact, and tiny)
    w.add_tensor("token_embd.weight", _normal("token_embd.weight", (n_vocab, N_EMBD), dtype=np.float16))
    w.add_tensor("output_norm.weight", ones)
    for i in range(N_LAYER):
        b = f"blk.{i}."
        for name, shape in [("attn_q", (N_HEAD * head, N_EMBD)), ("attn_k", (kv, N_EMBD)),
                            ("attn_v", (kv, N_EMBD)), ("attn_output", (N_EMBD, N_HEAD * head)),
                            ("ffn_gate", (N_FF, N_EMBD)), ("ffn_up", (N_FF, N_EMBD)),
                            ("ffn_down", (N_EMBD, N_FF))]:
            w.add_tensor(f"{b}{name}.weight", _normal(f"{b}{name}.weight", shape))
        w.add_tensor(b + "attn_norm.weight", ones)
        w.add_tensor(b + "ffn_norm.weight", ones)
    _finish(w)


def _donor_tokenizer(added: tuple[str, ...] | list[str] = IMAGE_TOKENS
                     ) -> tuple[list[tuple[str, object, object]], int]:
    """The donor's tokenizer.* keys as (key, GGUF value type, value), `added` (SmolVLM's image
    tokens; tests/vision_model_mrope.py passes Qwen2-VL's) appended to its vocabulary as control
    tokens (text becomes them only where special tokens are parsed, as mtmd parses its image
    markers), and the vocabulary's new size.

    Read with the repo's own header reader, not gguf.GGUFReader: that builds a numpy view per
    array element, 3.5 s here over SmolLM2's 49k tokens and 48k merges (engine/models/gguf_info.py
    says why), against tens of milliseconds. Both give the same file, byte for byte."""
    import gguf

    from engine.models.gguf_info import array_bytes, read_gguf

    V = gguf.GGUFValueType
    info = read_gguf(DONOR)
    out: list[tuple[str, object, object]] = []
    for key, value in info.metadata.items():
        if not key.startswith("tokenizer."):
            continue
        if key in info.arrays:
            span, data = array_bytes(info, key)
            out.append((key, (V.ARRAY, V(span.itype)), _elements(span.itype, span.count, data)))
        else:  # read_gguf keeps values, not types; tokenizer scalars are flags, names and u32 ids
            vtype = V.BOOL if isinstance(value, bool) else V.STRING if isinstance(value, str) \
                else V.FLOAT32 if isinstance(value, float) else V.UINT32
            out.append((key, vtype, value))
    tokens = next(v for k, _, v in out if k == "tokenizer.ggml.tokens")
    present = set(tokens)
    missing = [t for t in added if t not in present]
    extra = {"tokenizer.ggml.tokens": missing,
             "tokenizer.ggml.token_type": [int(gguf.TokenType.CONTROL)] * len(missing),
             "tokenizer.ggml.scores": [0.0] * len(missing)}
    out = [(k, t, v + extra[k] if k in extra else v) for k, t, v in out]
    return out, len(tokens) + len(missing)


def _elements(itype: int, count: int, data: bytes) -> list:
    """A GGUF array's elements from its stored bytes (strings: a u64 length, then UTF-8)."""
    if itype == 8:
        out, off = [], 0
        for _ in range(count):
            n = int.from_bytes(data[off:off + 8], "little")
            out.append(data[off + 8:off + 8 + n].decode("utf-8"))
            off += 8 + n
        return out
    dtypes = {0: "u1", 1: "i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
              10: "<u8", 11: "<i8", 12: "<f8"}
    return np.frombuffer(data, dtype=dtypes[itype], count=count).tolist()


# ---- the mmproj ---------------------------------------------------------------------------------
def _write_mmproj(path: Path) -> None:
    """Keys and tensors as clip.cpp reads them for PROJECTOR_TYPE_IDEFICS3, by the names in
    clip-impl.h (KEY_*, TN_*): the file says in so many words what clip.cpp looks up, whichever
    add_vision_* helpers the installed gguf release has."""
    import gguf

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.type", "mmproj")
    w.add_name("synthetic SmolVLM mmproj (tiny, random weights)")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "idefics3")
    w.add_bool("clip.use_gelu", True)  # SmolVLM's ViT: GELU (tanh), not CLIP's quick GELU
    w.add_uint32("clip.vision.projection_dim", N_EMBD)
    w.add_uint32("clip.vision.image_size", IMAGE_SIZE)
    w.add_uint32("clip.vision.patch_size", PATCH_SIZE)
    w.add_uint32("clip.vision.embedding_length", V_EMBD)
    w.add_uint32("clip.vision.feed_forward_length", V_FF)
    w.add_uint32("clip.vision.block_count", V_LAYER)
    w.add_uint32("clip.vision.attention.head_count", V_HEAD)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", V_EPS)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])  # SmolVLM's: pixels to [-1, 1]
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_uint32("clip.vision.projector.scale_factor", SCALE_FACTOR)
    w.add_uint32("clip.vision.preproc_image_size", LONGEST_EDGE)

    n_pos = (IMAGE_SIZE // PATCH_SIZE) ** 2
    zeros, ones = np.zeros(V_EMBD, dtype=np.float32), np.ones(V_EMBD, dtype=np.float32)
    # conv kernel, numpy (out, in, kh, kw) = ggml [kw, kh, in, out]; F32 works with ggml's im2col
    w.add_tensor("v.patch_embd.weight", _normal("v.patch_embd.weight", (V_EMBD, 3, PATCH_SIZE, PATCH_SIZE)))
    w.add_tensor("v.patch_embd.bias", zeros)
    w.add_tensor("v.position_embd.weight", _normal("v.position_embd.weight", (n_pos, V_EMBD)))
    for i in range(V_LAYER):
        b = f"v.blk.{i}."
        for name, shape, bias in [("attn_q", (V_EMBD, V_EMBD), V_EMBD), ("attn_k", (V_EMBD, V_EMBD), V_EMBD),
                                  ("attn_v", (V_EMBD, V_EMBD), V_EMBD), ("attn_out", (V_EMBD, V_EMBD), V_EMBD),
                                  ("ffn_up", (V_FF, V_EMBD), V_FF), ("ffn_down", (V_EMBD, V_FF), V_EMBD)]:
            w.add_tensor(f"{b}{name}.weight", _normal(f"{b}{name}.weight", shape))
            w.add_tensor(f"{b}{name}.bias", np.zeros(bias, dtype=np.float32))
        for norm in ("ln1", "ln2"):
            w.add_tensor(f"{b}{norm}.weight", ones)
            w.add_tensor(f"{b}{norm}.bias", zeros)
    w.add_tensor("v.post_ln.weight", ones)
    w.add_tensor("v.post_ln.bias", zeros)
    # pixel shuffle stacks SCALE_FACTOR^2 neighbouring patches: that many times V_EMBD in, N_EMBD out
    w.add_tensor("mm.model.fc.weight", _normal("mm.model.fc.weight", (N_EMBD, V_EMBD * SCALE_FACTOR ** 2)))
    _finish(w)


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":  # `python tests/vision_model.py`: build (or find) the pair, say where
    sys.path.insert(0, str(ROOT))  # engine.models.gguf_info, for the donor's tokenizer
    for p in vision_pair():
        print(p, p.stat().st_size)
