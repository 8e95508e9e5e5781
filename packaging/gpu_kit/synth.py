"""Demo-model skeletons: a GGUF's header without its weights, and a same-shaped file rebuilt from it.

The demo models (98 and 253 MB) cannot travel inside the kit's 64 MiB. What a speed, VRAM or
KV-restore measurement depends on is the model's shapes and tensor types, not its weights: so the
kit carries each model's *skeleton* (every byte before the tensor data: metadata, tokenizer and
tensor table, xz-compressed) and the GPU box rebuilds a file of the same size with the same tensor
table, whose weights are random but valid blocks of each tensor's own ggml type (no re-quantization:
the Q4_K_M mix of Q4_K / Q5_0 / Q6_K / Q8_0 tensors is exactly the original's).

    python synth.py skeleton models/gemma-3-270m-q4_k_m.gguf out.skel.xz     # here (pack.py does it)
    python synth.py make out.skel.xz /tmp/gemma-3-270m-q4_k_m.gguf MANIFEST.json   # there (gpu_check.py)

Answers from such a model are gibberish; CPU and GPU still compute the same function, so greedy
agreement and every byte count are meaningful. Weights are scaled so activations stay O(1): each
element has a standard deviation of about 1/sqrt(row length), norm weights are 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.models.gguf_info import GGUFInfo, read_gguf  # noqa: E402  (the repository travels with the kit)

# ggml type id -> (block bytes, [(offset of an f16 scale field, multiplier of d)], std of the integer
# part of one weight for random bits). Layouts are ggml-common.h's block_* structs; "d" fields get
# d = sigma / std, "min" fields a multiple of d that centres the weights near zero.
_QUANT = {
    2: (18, [(0, 1.0)], 4.6),                     # Q4_0: d, qs[16]              w = d*(q-8)
    3: (20, [(0, 1.0), (2, -7.5)], 4.6),          # Q4_1: d, m, qs[16]           w = d*q + m
    6: (22, [(0, 1.0)], 9.2),                     # Q5_0: d, qh[4], qs[16]       w = d*(q-16)
    7: (24, [(0, 1.0), (2, -15.5)], 9.2),         # Q5_1: d, m, qh[4], qs[16]
    8: (34, [(0, 1.0)], 74.0),                    # Q8_0: d, qs[32] (int8)
    10: (84, [(80, 1.0), (82, 1.5)], 12.0),       # Q2_K: scales[16], qs[64], d, dmin
    11: (110, [(108, 1.0)], 42.0),                # Q3_K: hmask[32], qs[64], scales[12], d
    12: (144, [(0, 1.0), (2, 7.5)], 224.0),       # Q4_K: d, dmin, scales[12], qs[128]
    13: (176, [(0, 1.0), (2, 15.5)], 442.0),      # Q5_K: d, dmin, scales[12], qh[32], qs[128]
    14: (210, [(208, 1.0)], 1370.0),              # Q6_K: ql[128], qh[64], scales[16] (int8), d
}
_DENSE = {0: np.float32, 1: np.float16}
_BF16 = 30


class SkeletonError(RuntimeError):
    pass


def data_start(info: GGUFInfo) -> int:
    """Offset of the tensor data section (everything before it is the skeleton)."""
    end = max((t.offset + (t.nbytes or 0) for t in info.tensors), default=0)
    return info.data_end - end


def make_skeleton(model: Path, dest: Path) -> dict:
    """Write `model`'s header (metadata, tokenizer, tensor table) xz-compressed to `dest`; returns
    its manifest entry."""
    info = read_gguf(model)
    unknown = sorted({t.type_name for t in info.tensors if t.type_id not in _QUANT and t.type_id not in _DENSE
                      and t.type_id != _BF16})
    if unknown:
        raise SkeletonError(f"{model.name}: no synthesiser for tensor types {unknown}")
    start = data_start(info)
    with open(model, "rb") as f:
        head = f.read(start)
    dest.write_bytes(lzma.compress(head, preset=9 | lzma.PRESET_EXTREME))
    types: dict[str, int] = {}
    for t in info.tensors:
        types[t.type_name] = types.get(t.type_name, 0) + 1
    return {"file": model.name, "file_size": info.file_size, "header_bytes": start,
            "header_sha256": hashlib.sha256(head).hexdigest(), "skeleton": dest.name,
            "skeleton_bytes": dest.stat().st_size, "n_tensors": len(info.tensors), "tensor_types": types,
            "arch": info.arch}


def _tensor_bytes(t, rng: np.random.Generator) -> bytes:
    sigma = 1.0 / np.sqrt(max(1, t.shape[0]))
    if t.type_id in _QUANT:
        block, fields, spread = _QUANT[t.type_id]
        raw = np.frombuffer(rng.bytes(t.nbytes), dtype=np.uint8).reshape(-1, block).copy()
        d = sigma / spread
        for offset, mult in fields:
            raw[:, offset:offset + 2] = np.frombuffer(np.float16(d * mult).tobytes(), dtype=np.uint8)
        return raw.tobytes()
    n = t.n_elements
    if len(t.shape) == 1 or n == t.shape[0]:
        # norms (and rope frequency factors) multiply: 1 keeps activations as they are; biases add: 0
        values = np.ones(n, np.float32) if ("norm" in t.name or "rope" in t.name) else np.zeros(n, np.float32)
    else:
        values = rng.standard_normal(n, dtype=np.float32) * np.float32(sigma)
    if t.type_id == _BF16:
        return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return values.astype(_DENSE[t.type_id]).tobytes()


def synthesize(skeleton: Path, dest: Path, expect: dict, seed: int = 0) -> dict:
    """Rebuild a GGUF from its skeleton with random weights of each tensor's own type.

    Args:
        expect: the skeleton's manifest entry (make_skeleton's answer): file size, header digest.

    Returns:
        facts about the file written (size, tensors, seconds).
    """
    t0 = time.monotonic()
    head = lzma.decompress(skeleton.read_bytes())
    if hashlib.sha256(head).hexdigest() != expect["header_sha256"]:
        raise SkeletonError(f"{skeleton.name}: header digest differs from the manifest")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    with open(tmp, "wb") as f:
        f.write(head)
        f.truncate(expect["file_size"])  # sparse until the tensors are written
    info = read_gguf(tmp)
    start = data_start(info)
    if start != len(head):
        raise SkeletonError(f"{skeleton.name}: tensor data would start at {start}, header is {len(head)} bytes")
    with open(tmp, "r+b") as f:
        for t in sorted(info.tensors, key=lambda t: t.offset):
            rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
            data = _tensor_bytes(t, rng)
            if len(data) != t.nbytes:
                raise SkeletonError(f"{t.name}: wrote {len(data)} bytes, the table says {t.nbytes}")
            f.seek(start + t.offset)
            f.write(data)
    os.replace(tmp, dest)
    return {"path": str(dest), "file_size": dest.stat().st_size, "n_tensors": len(info.tensors),
            "seconds": round(time.monotonic() - t0, 2), "seed": seed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("skeleton", help="model.gguf -> skeleton.xz")
    s.add_argument("model", type=Path)
    s.add_argument("dest", type=Path)
    m = sub.add_parser("make", help="skeleton.xz -> model.gguf with random weights")
    m.add_argument("skeleton", type=Path)
    m.add_argument("dest", type=Path)
    m.add_argument("manifest", type=Path, help="the kit's MANIFEST.json (file size, header digest)")
    m.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "skeleton":
        print(json.dumps(make_skeleton(args.model, args.dest), indent=2))
        return 0
    models = json.loads(args.manifest.read_text(encoding="utf-8"))["models"]
    expect = next((m for m in models.values() if m["skeleton"] == args.skeleton.name), None)
    if expect is None:
        raise SkeletonError(f"{args.skeleton.name} is not in {args.manifest}")
    print(json.dumps(synthesize(args.skeleton, args.dest, expect, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
