"""A tiny synthetic vision model pair in Qwen2-VL's llama.cpp architecture, made at test time.

tests/vision_model.py's SmolVLM pair counts one position per image token; Qwen2-VL's decoder uses
M-RoPE, where an image of nx × ny embeddings advances the position by max(nx, ny) only, and the
text after it goes on from there. This pair is that case, with nothing to download: written with
`gguf.GGUFWriter`, in the same way and for the same reason as tests/vision_model.py's (mtmd is
tested on a pair's shapes, not on what its weights know):

* a text model: architecture `qwen2vl` (Qwen2 with M-RoPE: `qwen2vl.rope.dimension_sections`),
  2 layers, width 64, q/k/v biases as Qwen2 has, tied output, with the demo model's tokenizer plus
  the tokens Qwen2-VL adds, so mtmd's `<|vision_start|>` and `<|vision_end|>` around each image are
  one control token each, never text pieces;
* an mmproj: projector type `qwen2vl_merger` (PROJECTOR_TYPE_QWEN2VL; not Qwen2.5-VL's, which
  needs window-attention keys), as conversion/qwenvl.py writes a real Qwen2-VL's: a ViT with the
  Conv3d patch embedding split into two Conv2d kernels (`v.patch_embd.weight`, `.weight.1`: the
  two temporal frames, summed for a still image), no position table (2D rope in every block),
  pre-norm blocks with biases and quick GELU, the merger's LayerNorm (`v.post_ln`) and its MLP
  over 2 × 2 merged patches (`mm.0`, GELU, `mm.2`), whose output width is the text model's.

Weights, seeding, the cache directory and the atomic write are tests/vision_model.py's (imported
from it): byte-identical files on every run and machine, made once into
~/.cache/offline-assistant-bench/ under a versioned name.

    from tests.vision_model_mrope import mrope_pair
    model_path, mmproj_path = mrope_pair()

What an image becomes (mtmd's dyn_size preprocessing for Qwen2-VL): one chunk, no tiles. The image
is resized to multiples of 28 px (a 14 px patch, merged 2 × 2) nearest its size, then scaled up or
down to between 8 and 4096 merged tokens: clip.cpp fixes those limits for Qwen2-VL (no GGUF key
sets them; mtmd_context_params' image_min/max_tokens would). A w × h result is (w/28) × (h/28)
embeddings at max(w/28, h/28) positions: 112 × 84 is 4 × 3, 12 tokens, 4 positions; 84 × 84 is
9 tokens, 3 positions; 56 × 84 (6 tokens) is under the minimum, scaled up to 84 × 112: 12 and 4.
The text around it: `<|vision_start|>`, the image chunk, `<|vision_end|>`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as `python tests/vision_model_mrope.py`: `tests` from the repo
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.vision_model import CACHE, DONOR, _atomic_write, _donor_tokenizer, _finish, _normal

VERSION = "v1"  # bump when anything below changes what is written
MODEL_NAME = f"synthetic-qwen2vl-tiny-{VERSION}.gguf"
MMPROJ_NAME = f"mmproj-synthetic-qwen2vl-tiny-{VERSION}.gguf"

# text model (Qwen2-VL's decoder: Qwen2 with M-RoPE)
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2    # grouped-query attention, as Qwen2-VL's
HEAD_DIM = N_EMBD // N_HEAD  # 16
N_FF = 128
N_CTX_TRAIN = 32768  # Qwen2-VL's max_position_embeddings
ROPE_BASE = 1_000_000.0  # Qwen2-VL's rope_theta
# M-RoPE: the rotated pairs (HEAD_DIM / 2 of them) split into temporal, height and width sections
# (and a fourth, unused by Qwen2-VL). ggml's rope_multi cycles through them by pair index, so
# they must sum to HEAD_DIM / 2. Qwen2-VL's [16, 24, 24] of 64 pairs, scaled to 8.
ROPE_SECTIONS = [2, 3, 3, 0]

# vision encoder + merger
PATCH_SIZE = 14      # Qwen2-VL's
MERGE = 2            # spatial_merge_size: 2 × 2 patches per token, Qwen2-VL's (clip.cpp's default)
IMAGE_SIZE = 560     # conversion/qwenvl.py's default; mtmd sizes Qwen2-VL images by pixel count
                     # limits instead, so this is read but shapes nothing here (no warmup)
V_EMBD = 32
V_HEAD = 2           # head dim 16: the ViT's 2D rope takes 4 sections of head_dim / 4
V_FF = 4 * V_EMBD    # Qwen2-VL's mlp_ratio 4; != V_EMBD, or clip.cpp would swap ffn_up/ffn_down
                     # (old exports had them backwards; it checks ffn_down's input width)
V_LAYER = 2
V_EPS = 1e-6
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]  # Qwen2-VL's preprocessor: OpenAI CLIP's
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# The tokens Qwen2-VL's tokenizer adds after Qwen2's (151646..151656, appended in that order). For
# PROJECTOR_TYPE_QWEN2VL mtmd.cpp writes "<|vision_start|>" and "<|vision_end|>" around each image
# as text parsed for special tokens: missing, each would tokenize as a handful of ordinary pieces.
# The others (grounding boxes, video, the pads HF's processor expands) make the vocabulary look
# like Qwen2-VL's to anything that asks; mtmd uses none of them. "<|im_start|>", "<|im_end|>" and
# "<|endoftext|>" are SmolLM2's already, and its ChatML template is Qwen2-VL's text format.
QWEN_VL_TOKENS = ["<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",
                  "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]


def mrope_pair() -> tuple[Path, Path]:
    """(text model path, mmproj path) of the synthetic Qwen2-VL pair, built on first use, then reused."""
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
    print(f"# built the synthetic Qwen2-VL pair in {time.monotonic() - t0:.2f} s: {model}, {mmproj}",
          file=sys.stderr)
    return model, mmproj


# ---- the text model ---------------------------------------------------------------------------
def _write_text_model(path: Path) -> None:
    import gguf

    tokenizer, n_vocab = _donor_tokenizer(QWEN_VL_TOKENS)
    w = gguf.GGUFWriter(str(path), "qwen2vl")
    w.add_name("synthetic Qwen2-VL text model (tiny, random weights)")
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_rope_dimension_sections(ROPE_SECTIONS)  # qwen2vl.rope.dimension_sections: required
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    for key, vtype, value in tokenizer:
        if isinstance(vtype, tuple):  # (ARRAY, element type): the donor's element type, not a guess
            w.add_key_value(key, value, vtype[0], sub_type=vtype[1])
        else:
            w.add_key_value(key, value, vtype)

    kv = HEAD_DIM * N_HEAD_KV
    ones = np.ones(N_EMBD, dtype=np.float32)
    # F16 for the one big matrix (tied, as Qwen2-VL-2B's: also the output layer), F32 elsewhere
    w.add_tensor("token_embd.weight", _normal("token_embd.weight", (n_vocab, N_EMBD), dtype=np.float16))
    w.add_tensor("output_norm.weight", ones)
    for i in range(N_LAYER):
        b = f"blk.{i}."
        for name, shape in [("attn_q", (N_HEAD * HEAD_DIM, N_EMBD)), ("attn_k", (kv, N_EMBD)),
                            ("attn_v", (kv, N_EMBD)), ("attn_output", (N_EMBD, N_HEAD * HEAD_DIM)),
                            ("ffn_gate", (N_FF, N_EMBD)), ("ffn_up", (N_FF, N_EMBD)),
                            ("ffn_down", (N_EMBD, N_FF))]:
            w.add_tensor(f"{b}{name}.weight", _normal(f"{b}{name}.weight", shape))
        # Qwen2's q/k/v biases (no output bias): non-zero, so the graph's bias adds are exercised
        for name, width in [("attn_q", N_HEAD * HEAD_DIM), ("attn_k", kv), ("attn_v", kv)]:
            w.add_tensor(f"{b}{name}.bias", _normal(f"{b}{name}.bias", (width,)))
        w.add_tensor(b + "attn_norm.weight", ones)
        w.add_tensor(b + "ffn_norm.weight", ones)
    _finish(w)


# ---- the mmproj ---------------------------------------------------------------------------------
def _write_mmproj(path: Path) -> None:
    """Keys and tensors as clip.cpp reads them for PROJECTOR_TYPE_QWEN2VL (load_hparams, load_tensors,
    models/qwen2vl.cpp), by the names in clip-impl.h (KEY_*, TN_*), written out in full as
    tests/vision_model.py does."""
    import gguf

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.type", "mmproj")
    w.add_name("synthetic Qwen2-VL mmproj (tiny, random weights)")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "qwen2vl_merger")  # clip-impl.h's name for PROJECTOR_TYPE_QWEN2VL
    # no clip.use_gelu / use_silu: quick GELU in the ViT, Qwen2-VL's hidden_act
    w.add_uint32("clip.vision.projection_dim", N_EMBD)
    w.add_uint32("clip.vision.image_size", IMAGE_SIZE)
    w.add_uint32("clip.vision.patch_size", PATCH_SIZE)
    w.add_uint32("clip.vision.embedding_length", V_EMBD)
    w.add_uint32("clip.vision.feed_forward_length", V_FF)
    w.add_uint32("clip.vision.block_count", V_LAYER)
    w.add_uint32("clip.vision.attention.head_count", V_HEAD)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", V_EPS)
    w.add_array("clip.vision.image_mean", CLIP_MEAN)
    w.add_array("clip.vision.image_std", CLIP_STD)
    w.add_uint32("clip.vision.spatial_merge_size", MERGE)

    zeros, ones = np.zeros(V_EMBD, dtype=np.float32), np.ones(V_EMBD, dtype=np.float32)
    # Conv3d (out, in, t=2, kh, kw) split by frame into two Conv2d kernels, numpy (out, in, kh, kw)
    # = ggml [kw, kh, in, out]; F32 works with ggml's im2col. No bias: models/qwen2vl.cpp asserts
    # there is none, and no class embedding or position table either.
    for name in ("v.patch_embd.weight", "v.patch_embd.weight.1"):
        w.add_tensor(name, _normal(name, (V_EMBD, 3, PATCH_SIZE, PATCH_SIZE)))
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
    # the merger: LayerNorm per patch (HF's merger.ln_q), then an MLP over MERGE² patches stacked
    # (merger.mlp.0, GELU, merger.mlp.2): MERGE² × V_EMBD in, N_EMBD out, the text model's width
    merged = V_EMBD * MERGE ** 2
    w.add_tensor("v.post_ln.weight", ones)
    w.add_tensor("v.post_ln.bias", zeros)
    w.add_tensor("mm.0.weight", _normal("mm.0.weight", (merged, merged)))
    w.add_tensor("mm.0.bias", np.zeros(merged, dtype=np.float32))
    w.add_tensor("mm.2.weight", _normal("mm.2.weight", (N_EMBD, merged)))
    w.add_tensor("mm.2.bias", np.zeros(N_EMBD, dtype=np.float32))
    _finish(w)


if __name__ == "__main__":  # `python tests/vision_model_mrope.py`: build (or find) the pair, say where
    for p in mrope_pair():
        print(p, p.stat().st_size)
