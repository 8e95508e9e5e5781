"""KV-cache and weights accounting from GGUF metadata or catalog facts, never from the weights.

Mirrors llama.cpp as vendored in llama-cpp-python 0.3.36 (see docs/planner.md for the lines):
- KV cells: n_ctx padded to 256 (llama-context.cpp). Sliding-window layers live in a second cache
  of GGML_PAD(min(cells, n_swa + n_ubatch), 256) cells, or `cells` with swa_full (llama-kv-cache-iswa.cpp).
- Bytes per cell and layer: ggml_row_size(type_k, n_kv_heads*head_dim_k) + the same for V; without
  flash attention V is stored transposed at the widest layer's width (llama-kv-cache.cpp).
- Placement: n_gpu_layers counts the output layer, which is the first to go to the GPU; the token
  embedding always stays on the CPU; a tied output (no output.weight) is a copy of the embedding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.models.catalog import ModelEntry
from engine.models.gguf_info import GGUFInfo

MIB = 1024 * 1024
CELL_PAD = 256  # llama.cpp pads n_ctx and the SWA cache to this many cells
# KV cache types: (elements per block, bytes per block); ordered least to most quantised.
KV_TYPES = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}
KV_ORDER = tuple(KV_TYPES)

# Default SWA layer patterns, from each architecture's load_arch_hparams (src/models/*.cpp):
# (n_pattern, dense_first). A GGUF's own attention.sliding_window_pattern overrides these.
SWA_PATTERNS = {"gemma2": (2, False), "gemma3": (6, False), "gemma-embedding": (6, False),
                "cohere2": (4, False), "gpt-oss": (2, False), "llama4": (4, False),
                "exaone4": (4, False), "olmo2": (4, False), "smallthinker": (4, True)}
# Catalog-only estimates: vocabulary per architecture family (not a catalog fact); unknown
# architectures get Gemma 3's 262144, the largest common one, so the estimate errs high.
VOCAB_BY_ARCH = {"qwen2": 152064, "qwen3": 151936, "llama": 128256, "gemma3": 262144, "gemma2": 256000,
                 "phi3": 200064, "glm4": 151552}  # vocab_size in each family's config.json
# Bits per weight of the token embedding / the output matrix in llama-quantize's mixes.
_EMBD_BITS = {"Q4_0": 4.5, "Q4_1": 5.0, "Q4_K_M": 4.5, "Q4_K_S": 4.5, "Q5_K_M": 5.5, "Q6_K": 6.5625,
              "Q8_0": 8.5, "F16": 16.0, "BF16": 16.0}
_OUTPUT_BITS = {"Q8_0": 8.5, "F16": 16.0, "BF16": 16.0}  # the K-quant mixes use Q6_K (6.5625)
_BLK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class ModelFacts:
    name: str
    arch: str
    source: str  # "gguf" (tensor table) or "catalog" (facts + file size, estimated)
    n_layers: int
    n_heads: tuple[int, ...]  # per layer
    n_kv_heads: tuple[int, ...]  # per layer (GQA/MQA: fewer than n_heads)
    head_dim_k: int
    head_dim_v: int
    n_embd: int
    n_vocab: int
    context_length: int
    n_swa: int  # sliding window in tokens, 0 = none
    swa_layers: tuple[bool, ...]  # per layer: lives in the sliding-window cache
    layer_bytes: tuple[int, ...]  # weights of each repeating layer
    input_bytes: int  # token embedding: always on the CPU
    output_bytes: int  # output norm + output matrix as stored in the file
    output_copy_bytes: int  # tied output: the embedding copied to the output layer's device
    file_weights_bytes: int  # Σ tensors in the file (what a CPU-only load maps)
    notes: tuple[str, ...] = ()  # estimates and assumptions, quoted in plan explanations
    # A vision model's projector (issue 41): its weights (the file's bytes: all tensors), loaded on
    # the GPU where any layer is; and the context tokens a typical photo takes (0: not known).
    projector_bytes: int = 0
    image_tokens: int = 0

    @property
    def has_swa(self) -> bool:
        return self.n_swa > 0 and any(self.swa_layers)


def _per_layer(value, n_layers: int, default: int) -> tuple[int, ...]:
    if isinstance(value, list):
        vals = [int(v) for v in value]
        if len(vals) != n_layers:
            raise ValueError(f"per-layer array has {len(vals)} entries for {n_layers} layers")
        return tuple(vals)
    return (int(default if value is None else value),) * n_layers


def swa_layer_flags(arch: str, n_layers: int, n_swa: int, pattern=None) -> tuple[tuple[bool, ...], str]:
    """Which layers use the sliding-window cache, as llama_hparams::set_swa_pattern decides."""
    if n_swa <= 0:
        return (False,) * n_layers, ""
    if isinstance(pattern, list):
        return tuple(bool(p) for p in pattern[:n_layers]), ""
    if isinstance(pattern, int):
        n_pattern, dense_first = pattern, False
    elif arch in SWA_PATTERNS:
        n_pattern, dense_first = SWA_PATTERNS[arch]
    else:
        return (False,) * n_layers, f"sliding window of {arch} not modelled: all layers counted at full context"
    if dense_first:
        flags = tuple(n_pattern == 0 or il % n_pattern != 0 for il in range(n_layers))
    else:
        flags = tuple(n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(n_layers))
    return flags, ""


def facts_from_gguf(info: GGUFInfo, name: str | None = None) -> ModelFacts:
    """Architecture facts and exact per-layer weight bytes from a GGUF's metadata and tensor table."""
    g = info.arch_value
    n_layers = int(g("block_count", 0))
    if n_layers <= 0:
        raise ValueError(f"{info.path.name}: no {info.arch}.block_count in the metadata")
    n_embd = int(g("embedding_length", 0))
    n_heads = _per_layer(g("attention.head_count"), n_layers, 0)
    first_heads = next((h for h in n_heads if h), 1)
    kv_raw = g("attention.head_count_kv")  # absent: plain multi-head attention; 0 in an array: no KV
    n_kv = n_heads if kv_raw is None else _per_layer(kv_raw, n_layers, 0)
    head_k = int(g("attention.key_length", 0) or n_embd // first_heads)
    head_v = int(g("attention.value_length", 0) or n_embd // first_heads)
    n_swa = int(g("attention.sliding_window", 0) or 0)
    swa, note = swa_layer_flags(info.arch, n_layers, n_swa, g("attention.sliding_window_pattern"))
    notes = [note] if note else []
    layer = [0] * n_layers
    input_b = output_b = embd_b = 0
    has_output = False
    for t in info.tensors:
        nbytes = t.nbytes
        if nbytes is None:  # a ggml type newer than our table: count it as f32, which errs high
            nbytes = t.n_elements * 4
            notes.append(f"tensor {t.name} has ggml type {t.type_id} unknown here: counted as f32")
        m = _BLK.match(t.name)
        if m and int(m.group(1)) < n_layers:
            layer[int(m.group(1))] += nbytes
        elif t.name.startswith("token_embd"):
            input_b += nbytes
            embd_b = nbytes if t.name == "token_embd.weight" else embd_b
        else:  # output, output_norm and the odd global tensor go with the output layer
            output_b += nbytes
            has_output = has_output or t.name == "output.weight"
    embd = next((t for t in info.tensors if t.name == "token_embd.weight"), None)
    n_vocab = int(embd.shape[1]) if embd is not None and len(embd.shape) > 1 else int(g("vocab_size", 0) or 0)
    return ModelFacts(
        name=name or info.path.stem, arch=info.arch, source="gguf", n_layers=n_layers,
        n_heads=n_heads, n_kv_heads=n_kv, head_dim_k=head_k, head_dim_v=head_v, n_embd=n_embd,
        n_vocab=n_vocab, context_length=int(g("context_length", 0) or 0), n_swa=n_swa, swa_layers=swa,
        layer_bytes=tuple(layer), input_bytes=input_b, output_bytes=output_b,
        output_copy_bytes=0 if has_output else embd_b,
        file_weights_bytes=sum(layer) + input_b + output_b, notes=tuple(notes))


def facts_from_catalog(entry: ModelEntry) -> ModelFacts:
    """Facts of a model that is not downloaded: catalog facts, weights estimated from size_bytes.

    Where the entry has no n_embd or n_vocab, n_embd is taken as n_heads*head_dim_k and the
    vocabulary from VOCAB_BY_ARCH; the embedding is removed from the file size and the rest split
    evenly over the layers (as if the output were tied). Offloading the output layer is then costed
    as an untied output matrix at Q6_K (or the file's type if larger), so the GPU side errs high
    while a CPU-only load still adds up to the file size.
    """
    n = entry.n_layers
    n_embd = entry.n_embd or entry.n_heads * entry.head_dim_k
    vocab = entry.n_vocab or VOCAB_BY_ARCH.get(entry.arch, 262144)
    quant = entry.quant.upper()
    embd = int(vocab * n_embd * _EMBD_BITS.get(quant, 8.5) / 8)
    output = int(vocab * n_embd * max(_OUTPUT_BITS.get(quant, 6.5625), _EMBD_BITS.get(quant, 0)) / 8)
    embd = min(embd, entry.size_bytes // 2)  # a wrong vocabulary guess must not eat the layers
    per_layer = (entry.size_bytes - embd) // n
    swa, note = swa_layer_flags(entry.arch, n, entry.sliding_window)
    notes = [f"catalog facts: per-layer weights estimated from the file size ({entry.size_bytes / MIB:.0f} MiB "
             f"minus an embedding of {vocab} x {n_embd}), vocabulary {vocab} "
             + ("from the catalog" if entry.n_vocab else f"assumed for {entry.arch}")]
    notes += [note] if note else []
    return ModelFacts(
        name=entry.id, arch=entry.arch, source="catalog", n_layers=n, n_heads=(entry.n_heads,) * n,
        n_kv_heads=(entry.n_kv_heads,) * n, head_dim_k=entry.head_dim_k, head_dim_v=entry.head_dim_v,
        n_embd=n_embd, n_vocab=vocab, context_length=entry.context_length, n_swa=entry.sliding_window,
        swa_layers=swa, layer_bytes=(per_layer,) * n, input_bytes=embd, output_bytes=0,
        output_copy_bytes=output, file_weights_bytes=entry.size_bytes, notes=tuple(notes))


# ---- KV cache

def pad(n: int, to: int = CELL_PAD) -> int:
    return -(-n // to) * to


def kv_row_bytes(type_name: str, n_elements: int) -> int:
    """ggml_row_size: f16 2 bytes/element, q8_0 34 bytes/32, q4_0 18 bytes/32."""
    per_block, block_bytes = KV_TYPES[type_name]
    if n_elements % per_block:
        raise ValueError(f"{type_name} needs rows in multiples of {per_block}, got {n_elements}")
    return n_elements // per_block * block_bytes


def kv_cell_bytes(f: ModelFacts, il: int, type_k: str = "f16", type_v: str = "f16",
                  flash_attn: bool = False) -> int:
    """Bytes one token takes in layer il's K and V caches."""
    v_heads = f.n_kv_heads[il] if flash_attn else max(f.n_kv_heads)  # transposed V: widest layer
    return kv_row_bytes(type_k, f.n_kv_heads[il] * f.head_dim_k) + kv_row_bytes(type_v, v_heads * f.head_dim_v)


def kv_bytes_per_token(f: ModelFacts, type_k: str = "f16", type_v: str = "f16", flash_attn: bool = False) -> int:
    """Σ over layers of n_kv_heads*(head_dim_k + head_dim_v) at the cache types' sizes (no window)."""
    return sum(kv_cell_bytes(f, il, type_k, type_v, flash_attn) for il in range(f.n_layers))


def kv_cells(f: ModelFacts, n_ctx: int, n_ubatch: int = 512, swa_full: bool = False) -> tuple[int, int]:
    """(cells of the full-attention cache, cells of the sliding-window cache) llama.cpp allocates."""
    cells = pad(n_ctx)
    ubatch = min(n_ubatch, n_ctx)  # llama.cpp: n_ubatch <= n_batch <= n_ctx
    if not f.has_swa or swa_full:
        return cells, cells
    return cells, pad(min(cells, f.n_swa + ubatch))


def kv_bytes(f: ModelFacts, n_ctx: int, type_k: str = "f16", type_v: str = "f16", flash_attn: bool = False,
             n_ubatch: int = 512, swa_full: bool = False, layers=None) -> int:
    """KV cache bytes for the given layers (default all): Σ cells(layer) x bytes per cell."""
    full, swa = kv_cells(f, n_ctx, n_ubatch, swa_full)
    ids = range(f.n_layers) if layers is None else layers
    return sum((swa if f.swa_layers[il] else full) * kv_cell_bytes(f, il, type_k, type_v, flash_attn) for il in ids)


def mha_ratio(f: ModelFacts) -> float:
    """How many times larger the KV cache of the same model with one KV head per query head would be."""
    mha = sum(h * (f.head_dim_k + f.head_dim_v) for h in f.n_heads)
    ours = sum(h * (f.head_dim_k + f.head_dim_v) for h in f.n_kv_heads)
    return mha / ours if ours else 1.0


# ---- weights and compute

def gpu_layer_ids(f: ModelFacts, n_gpu_layers: int) -> range:
    """Repeating layers on the GPU: the last n_gpu_layers - 1 (the output layer takes the first slot)."""
    start = max(f.n_layers + 1 - max(n_gpu_layers, 0), 0)
    return range(min(start, f.n_layers), f.n_layers)


def weights_split(f: ModelFacts, n_gpu_layers: int) -> tuple[int, int]:
    """(bytes on the GPU, bytes on the CPU) of the weights at this n_gpu_layers."""
    on_gpu = gpu_layer_ids(f, n_gpu_layers)
    gpu = sum(f.layer_bytes[il] for il in on_gpu)
    cpu = f.input_bytes + sum(f.layer_bytes[: on_gpu.start])
    if n_gpu_layers >= 1:
        gpu += f.output_bytes + f.output_copy_bytes
    else:
        cpu += f.output_bytes
    return gpu, cpu


def compute_resident_estimate(f: ModelFacts, n_ctx: int, n_ubatch: int = 512, flash_attn: bool = False) -> int:
    """ESTIMATE of the part of the compute buffer a full context makes resident in RAM.

    llama.cpp reserves the buffer for its worst-case graph, where every token of a micro-batch
    asks for logits; the engine asks for one position per decode, so those pages are never
    touched (demo-int4, 262 144 entries: 512 MiB reserved, none resident). What is touched at a
    full context: the attention scores and mask, or one row of logits, plus the hidden states.
    Measured against peak RSS by bench/real_size.py (docs/benchmarks.md, "Real size")."""
    ub = min(n_ubatch, n_ctx)
    cells = pad(n_ctx)
    scores = 0 if flash_attn else cells * ub * max(f.n_heads) * 4
    return max(f.n_vocab * 4, scores + cells * ub * 4) + 6 * ub * f.n_embd * 4


# The vocabulary (tokens, scores, merges, llama.cpp's maps) in memory, per copy: 16, 31 and 42 MiB
# measured for 49 152, 151 936 and 262 144 entries (RSS before and after a vocab-only load).
VOCAB_FIXED_BYTES = 10 * 2**20
VOCAB_BYTES_PER_TOKEN = 122


def vocab_bytes(n_vocab: int) -> int:
    return VOCAB_FIXED_BYTES + VOCAB_BYTES_PER_TOKEN * n_vocab


def compute_buffer_estimate(f: ModelFacts, n_ctx: int, n_ubatch: int = 512, flash_attn: bool = False) -> int:
    """ESTIMATE of llama.cpp's compute buffer (ggml-alloc reuses memory, so the peak is a max).

    Peak = max(logits for a full ubatch, attention scores without flash attention + mask)
    + a few hidden-state buffers. Fitted to the CPU backend; see docs/planner.md for the error.
    """
    ub = min(n_ubatch, n_ctx)
    cells = pad(n_ctx)
    logits = f.n_vocab * ub * 4
    scores = 0 if flash_attn else cells * ub * max(f.n_heads) * 4
    mask = cells * ub * 4
    hidden = 6 * ub * f.n_embd * 4
    return max(logits, scores + mask) + hidden
