"""engine/models/gguf_info.read_gguf against gguf.GGUFReader: time and peak memory to read a GGUF's
metadata and tensor table (the planner, the model manager and every load read them).

    .venv/bin/python bench/gguf_read.py            # the two demo models + a synthetic 7B-shaped file

The synthetic file has Qwen2.5-7B's shape where reading costs: 151 936 tokens (and 151 387 merges)
as string arrays, 28 layers, 339 tensors (matrices in Q4_K, vectors in F32); its data is a sparse hole (4.7 GB on paper, a few
MB on disk), so both readers see a complete file. Each reader runs in its own process (peak RSS
is per process): best of 3.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, resource, sys, time
path, which = sys.argv[1], sys.argv[2]
from engine.models.gguf_info import read_gguf
from gguf import GGUFReader
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if which == "gguf_info":
    info = read_gguf(path)
    n = (len(info.metadata), len(info.tensors))
else:
    r = GGUFReader(path)
    n = (len(r.fields), len(r.tensors))
seconds = time.perf_counter() - t
print(json.dumps({"s": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "import_rss_mb": before / 1024, "counts": n}))
"""


def synthetic(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(path, "qwen2")
    n_layer, d, ff, n_vocab, kv = 28, 3584, 18944, 151936, 512
    w.add_block_count(n_layer)
    w.add_context_length(32768)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(28)
    w.add_head_count_kv(4)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(n_vocab)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges([f"a{i} b{i}" for i in range(151387)])
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    q4k = gguf.GGMLQuantizationType.Q4_K

    sizes = []

    def tensor(name, shape):  # shape as numpy writes it (rows first); vectors (norms, biases) in F32
        kind = q4k if len(shape) == 2 else gguf.GGMLQuantizationType.F32
        byte_shape = gguf.quant_shape_to_byte_shape(shape, kind)
        nbytes = int(np.prod(byte_shape))
        sizes.append(-(-nbytes // 32) * 32)
        w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=kind)

    tensor("token_embd.weight", (n_vocab, d))
    tensor("output.weight", (n_vocab, d))
    for i in range(n_layer):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (kv, d)), ("attn_v", (kv, d)), ("attn_output", (d, d)),
                            ("ffn_gate", (ff, d)), ("ffn_up", (ff, d)), ("ffn_down", (d, ff)),
                            ("attn_q_bias", (d,)), ("attn_k_bias", (kv,)), ("attn_v_bias", (kv,)),
                            ("attn_norm", (d,)), ("ffn_norm", (d,))):
            tensor(f"blk.{i}.{name}.weight", shape)
    tensor("output_norm.weight", (d,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    # The data section as a hole: the readers only check that the file is long enough.
    with path.open("r+b") as fh:
        fh.truncate(-(-path.stat().st_size // 32) * 32 + sum(sizes))
    return path


def measure(path: Path, which: str) -> dict:
    runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, str(path), which], capture_output=True, text=True,
                                      check=True, cwd=ROOT).stdout) for _ in range(3)]
    return min(runs, key=lambda r: r["s"])


def main() -> None:
    files = [ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf", ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"]
    with tempfile.TemporaryDirectory() as tmp:
        files.append(synthetic(Path(tmp) / "qwen2-7b-shaped.gguf"))
        print("| file | reader | time | peak RSS added by the read | fields, tensors |")
        print("|---|---|---:|---:|---|")
        for path in files:
            for which in ("gguf_info", "GGUFReader"):
                r = measure(path, which)
                print(f"| {path.name} | {which} | {r['s'] * 1000:.0f} ms | +{r['rss_mb'] - r['import_rss_mb']:.0f} MB "
                      f"| {r['counts'][0]}, {r['counts'][1]} |")


if __name__ == "__main__":
    main()
