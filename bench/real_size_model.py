"""A GGUF shaped like a catalog model, with random weights: what bench/real_size.py measures on.

Speed, memory and KV bytes depend on a model's shapes and tensor types, not on its weights, and
the real files cannot be downloaded here. So the catalog's own facts (layers, width, FFN width,
heads, KV heads, head size, vocabulary, tied embeddings) make the tensor table, each tensor gets
the type llama.cpp's `llama-quantize` gives it in that quant (src/llama-quant.cpp), and the data
are random but valid blocks of that type (packaging/gpu_kit/synth.py, the GPU kit's method, scaled
so activations stay O(1)). The tokenizer is demo-small's (a GPT-2 BPE with ChatML markers, as
Qwen's), padded with unused entries to the catalog's vocabulary size, so the embedding and output
matrices have their real size. Answers are gibberish; every time and byte count is the real
shape's.

    .venv/bin/python bench/real_size_model.py qwen2.5-1.5b-instruct-q4_k_m [--dest DIR] [--donor GGUF]
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "packaging" / "gpu_kit")]

import gguf  # noqa: E402
from synth import _tensor_bytes  # noqa: E402  (random valid blocks of a ggml type)

from engine.models.catalog import ModelEntry, load_catalog, resolve_model  # noqa: E402
from engine.models.gguf_info import read_gguf  # noqa: E402

Q = gguf.GGMLQuantizationType
CACHE = Path.home() / ".cache" / "offline-assistant-bench"
ROPE_BASE = {"qwen2": 1_000_000.0, "qwen3": 1_000_000.0, "llama": 500_000.0}


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, row length)
    type: Q


def _more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's use_more_bits: the first and last eighth of the layers, every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_table(m: ModelEntry) -> list[Tensor]:
    """The tensors of a llama-like decoder of `m`'s shape, typed as llama-quantize's Q4_K_M does:
    Q4_K by default; attn_v and ffn_down Q6_K on the `_more_bits` layers; the output matrix Q6_K
    (the token embedding is the output where they are tied); norms and biases F32."""
    if m.quant != "Q4_K_M":
        raise SystemExit(f"{m.id}: only the Q4_K_M mix is modelled (the catalog says {m.quant})")
    if not (m.n_embd and m.n_ff and m.n_vocab):
        raise SystemExit(f"{m.id}: the catalog lacks n_embd, n_ff or n_vocab")
    d, ff, n = m.n_embd, m.n_ff, m.n_layers
    q_dim, kv_dim = m.n_heads * m.head_dim_k, m.n_kv_heads * m.head_dim_k
    out = [Tensor("token_embd.weight", (m.n_vocab, d), Q.Q6_K if m.tied_embeddings else Q.Q4_K),
           Tensor("output_norm.weight", (d,), Q.F32)]
    if not m.tied_embeddings:
        out.append(Tensor("output.weight", (m.n_vocab, d), Q.Q6_K))
    for i in range(n):
        b = f"blk.{i}."
        out += [Tensor(b + "attn_norm.weight", (d,), Q.F32),
                Tensor(b + "attn_q.weight", (q_dim, d), Q.Q4_K),
                Tensor(b + "attn_k.weight", (kv_dim, d), Q.Q4_K),
                Tensor(b + "attn_v.weight", (kv_dim, d), Q.Q6_K if _more_bits(i, n) else Q.Q4_K),
                Tensor(b + "attn_output.weight", (d, q_dim), Q.Q4_K),
                Tensor(b + "ffn_norm.weight", (d,), Q.F32),
                Tensor(b + "ffn_gate.weight", (ff, d), Q.Q4_K),
                Tensor(b + "ffn_up.weight", (ff, d), Q.Q4_K),
                Tensor(b + "ffn_down.weight", (d, ff), Q.Q6_K if _more_bits(i, n) else Q.Q4_K)]
        if m.arch == "qwen2":  # biases on q, k, v
            out += [Tensor(b + "attn_q.bias", (q_dim,), Q.F32), Tensor(b + "attn_k.bias", (kv_dim,), Q.F32),
                    Tensor(b + "attn_v.bias", (kv_dim,), Q.F32)]
        if m.arch == "qwen3":  # per-head norms of q and k
            out += [Tensor(b + "attn_q_norm.weight", (m.head_dim_k,), Q.F32),
                    Tensor(b + "attn_k_norm.weight", (m.head_dim_k,), Q.F32)]
    return out


def _nbytes(t: Tensor) -> int:
    block, size = gguf.GGML_QUANT_SIZES[t.type]
    return int(np.prod(t.shape)) // block * size


def _write_header(m: ModelEntry, tensors: list[Tensor], dest: Path, n_ctx_train: int, donor_path: Path) -> None:
    donor = read_gguf(donor_path)  # the tokenizer
    reader = gguf.GGUFReader(str(donor_path))
    field = lambda key: reader.fields[key].contents()  # noqa: E731
    tokens, types, merges = list(field("tokenizer.ggml.tokens")), list(field("tokenizer.ggml.token_type")), \
        list(field("tokenizer.ggml.merges"))
    pad = m.n_vocab - len(tokens)
    tokens += [f"[PAD{i}]" for i in range(pad)]
    types += [int(gguf.TokenType.UNUSED)] * pad
    w = gguf.GGUFWriter(str(dest), m.arch)
    w.add_name(f"synthetic {m.id}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_block_count(m.n_layers)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(m.n_embd)
    w.add_feed_forward_length(m.n_ff)
    w.add_head_count(m.n_heads)
    w.add_head_count_kv(m.n_kv_heads)
    w.add_key_length(m.head_dim_k)
    w.add_value_length(m.head_dim_v)
    w.add_rope_freq_base(ROPE_BASE.get(m.arch, 10_000.0))
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(m.n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(int(field("tokenizer.ggml.bos_token_id")))
    w.add_eos_token_id(int(field("tokenizer.ggml.eos_token_id")))
    w.add_add_bos_token(False)
    w.add_chat_template(donor.chat_template or "")
    for t in tensors:
        w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), _nbytes(t), raw_dtype=t.type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def synthesize(model_id: str, dest_dir: Path = CACHE, seed: int = 0, donor: Path | None = None) -> Path:
    """The synthetic GGUF of catalog model `model_id` (made once, then reused from `dest_dir`).
    `donor`: the GGUF whose tokenizer it takes (demo-small's; the GPU kit passes its rebuilt copy)."""
    m = load_catalog().get(model_id)
    if m is None:
        raise SystemExit(f"{model_id}: not in the catalog")
    dest = dest_dir / f"synthetic-{m.file}"
    if dest.is_file():
        return dest
    t0 = time.monotonic()
    dest_dir.mkdir(parents=True, exist_ok=True)
    tensors = tensor_table(m)
    part = dest.with_name(dest.name + ".part")
    _write_header(m, tensors, part, m.context_length, donor or resolve_model("demo-small").path)
    align = lambda n: -(-n // gguf.GGUF_DEFAULT_ALIGNMENT) * gguf.GGUF_DEFAULT_ALIGNMENT  # noqa: E731
    with open(part, "r+b") as f:  # sparse until the tensors are written
        f.truncate(align(part.stat().st_size) + sum(align(_nbytes(t)) for t in tensors))
    info = read_gguf(part)
    start = info.data_end - max(t.offset + (t.nbytes or 0) for t in info.tensors)  # header, aligned
    with open(part, "r+b") as f:
        for t in sorted(info.tensors, key=lambda t: t.offset):
            rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
            f.seek(start + t.offset)
            f.write(_tensor_bytes(t, rng))
    part.rename(dest)
    print(f"# synthesised {dest} ({dest.stat().st_size / 2**30:.2f} GiB) in {time.monotonic() - t0:.0f} s",
          file=sys.stderr)
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a catalog id with n_embd, n_ff and n_vocab")
    ap.add_argument("--dest", type=Path, default=CACHE)
    ap.add_argument("--donor", type=Path, help="the GGUF whose tokenizer to take (default: demo-small)")
    args = ap.parse_args()
    print(synthesize(args.model, args.dest, donor=args.donor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
