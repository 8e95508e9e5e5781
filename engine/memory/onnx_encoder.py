"""The embedding model run by ONNX Runtime: the same weights as sentence-transformers, 3-4× faster
per query on one CPU core, and no torch at run time.

The ONNX graph is exported once from the model's own weights (`export`, which needs torch: the
`memory` extra, `make models`, or the first start after install) and kept beside the models with
a sidecar that names the weights it came from. An export is kept only when its embeddings match
sentence-transformers' on a probe set (max |Δ| ≤ MAX_EXPORT_DIFF); any mismatch between the
sidecar and the weights means "export again", never "use a stale graph".

    .venv/bin/python -m engine.memory.export      # export the bundled model now (`make models` does)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from engine.config.paths import find_model_file, models_dir

log = logging.getLogger(__name__)

MAX_EXPORT_DIFF = 1e-4  # measured 2e-7 for all-MiniLM-L6-v2 (fp32 both ways)
PROBES = ["Who fixed the broken window?", "我的猫叫米索，今年三岁。", "ok", "a longer text about tax " * 40]
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Padded tokens per run of the graph: its activations grow with texts × tokens² (attention). 2 048
# texts of 256 tokens in one run took ~24 GB (96 of them ~1.7 GB); runs of 8 such texts (or 64 of
# 32 tokens) peak at ~150 MB more than the idle model, at the same speed per token.
RUN_TOKENS = 2048
# After each run the arena hands back what it grew by (it kept ~165 MB of 48 long texts for good);
# no slower measured, on long texts or short queries.
SHRINK = ("memory.enable_memory_arena_shrinkage", "cpu:0")
TOKENIZE_PIECE = 256  # texts tokenized at once (each encoding keeps its cut-off tokens too)
# Characters of a text the tokenizer is given, per token the model reads (256: 4 096 characters). It
# cuts at the model's limit only after tokenizing the whole text and keeps every cut-off token: 40
# inputs of 199 990 one-token characters took the server to 2 GB. Natural text averages 3-5
# characters a token (4.6 measured in English) and CJK 1, so 16 keeps the first 256 tokens of any
# real text. Given up: text averaging more (long whitespace runs, which take no token, or words past
# WordPiece's 100 characters, one [UNK] each) gets the vector of its first 4 096 characters.
CHARS_PER_TOKEN = 16


def weights_file(model_dir: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    raise FileNotFoundError(f"no model weights in {model_dir}")


def weights_digest(model_dir: Path) -> str:
    """sha256 of the weights file."""
    h = hashlib.sha256()
    with open(weights_file(model_dir), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def onnx_path(model_id: str, *, for_writing: bool = False) -> Path:
    """The exported graph: written under the writable models dir, read from there or the install."""
    relative = Path("embedders") / f"{model_id}.onnx"
    return models_dir() / relative if for_writing else find_model_file(relative)


def usable_export(model_id: str, model_dir: Path) -> Path | None:
    """The exported graph for these weights, or None (missing, other weights, unreadable sidecar)."""
    path = onnx_path(model_id)
    try:
        if not path.is_file():
            return None
        meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        try:
            weights = weights_file(model_dir)
        except FileNotFoundError:
            # An installed bundle ships the checked graph and the tokenizer but not the torch weights
            # (90 MB it would never read): the graph is then the model itself, exported at build time.
            return path if meta.get("model_id") == model_id else None
        stat = weights.stat()
        if (meta["weights_size"], meta["weights_mtime_ns"]) == (stat.st_size, stat.st_mtime_ns):
            return path
        # Same bytes under a new mtime (a reinstall) still count: compare the digest.
        return path if meta["weights_sha256"] == weights_digest(model_dir) else None
    except (OSError, ValueError, KeyError):
        return None


class OnnxEncoder:
    """Mean-pooled, L2-normalised sentence embeddings from an exported BERT-style encoder."""

    def __init__(self, onnx_file: Path, model_dir: Path, threads: int | None = 1, max_length: int | None = None):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        # One thread, like the torch path: on a 2-core laptop llama.cpp holds the other core.
        options.intra_op_num_threads = threads or 0
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()  # padding per batch, to the longest text, below
        max_length = max_length or _max_seq_length(model_dir)
        self.tokenizer.enable_truncation(max_length)
        self.max_length = max_length
        self.cls_pooling = _pooling(model_dir) == "cls"
        self._options = run_options()

    def encode(self, texts: list[str], stop=None) -> np.ndarray:
        """`stop`: an onnxruntime RunOptions whose `terminate`, set from another thread, ends the
        run between two graph nodes (milliseconds) with an exception."""
        texts, out = cut(texts, self.max_length), []
        for i in range(0, len(texts), TOKENIZE_PIECE):
            encodings = self.tokenizer.encode_batch(texts[i:i + TOKENIZE_PIECE])
            start = 0
            while start < len(encodings):  # runs of at most RUN_TOKENS padded tokens, in order
                end, width = start + 1, len(encodings[start].ids)
                while end < len(encodings) and max(width, len(encodings[end].ids)) * (end - start + 1) <= RUN_TOKENS:
                    width = max(width, len(encodings[end].ids))
                    end += 1
                out.append(self._run(encodings[start:end], width, stop))
                start = end
        return np.concatenate(out)

    def count(self, texts: list[str]) -> list[int]:
        """Tokens the graph reads of each text: cut at the model's limit, [CLS] and [SEP] included."""
        texts = cut(texts, self.max_length)
        return [len(e.ids) for i in range(0, len(texts), TOKENIZE_PIECE)
                for e in self.tokenizer.encode_batch(texts[i:i + TOKENIZE_PIECE])]

    def _run(self, encodings: list, width: int, stop) -> np.ndarray:
        batch = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in INPUTS}
        for row, e in enumerate(encodings):
            n = len(e.ids)
            batch["input_ids"][row, :n] = e.ids
            batch["attention_mask"][row, :n] = e.attention_mask
            batch["token_type_ids"][row, :n] = e.type_ids
        hidden = self.session.run(None, batch, stop if stop is not None else self._options)[0]
        if self.cls_pooling:
            pooled = hidden[:, 0]
        else:
            mask = batch["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.where(norms == 0, 1, norms)).astype(np.float32)


def cut(texts, max_tokens: int) -> list[str]:
    """Each text's first `CHARS_PER_TOKEN` × `max_tokens` characters: all a model reading
    `max_tokens` tokens is given of it (a shorter text is not copied)."""
    limit = CHARS_PER_TOKEN * max_tokens
    return [t[:limit] for t in texts]


def run_options():
    """Fresh RunOptions for one interruptible `encode` (see `Embedder.interrupt`)."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry(*SHRINK)
    return options


def _pooling(model_dir: Path) -> str:
    """"cls" or "mean", from the sentence-transformers pooling config (mean when there is none)."""
    try:
        config = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    except (OSError, ValueError):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens", True):
        return "mean"
    raise ValueError(f"unsupported pooling in {model_dir}: {config}")


def _max_seq_length(model_dir: Path) -> int:
    try:
        return int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError):
        return 256


def export(model_id: str, model_dir: Path, st_model=None) -> Path:
    """Export the sentence-transformers model in `model_dir` to ONNX, check it, keep it.

    Args:
        st_model: the already loaded SentenceTransformer (saves loading it again).

    Raises:
        RuntimeError: the exported graph's embeddings differ from the original's.
    """
    import torch
    from sentence_transformers import SentenceTransformer

    st_model = st_model or SentenceTransformer(str(model_dir), device="cpu")
    encoder = st_model[0].auto_model.eval()

    class Graph(torch.nn.Module):  # keyword arguments: BertModel's positional order changes across versions
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    path = onnx_path(model_id, for_writing=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    sample = st_model.tokenizer(["hello world"], return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")}
    try:
        with torch.inference_mode():
            torch.onnx.export(Graph(encoder), tuple(sample[name] for name in INPUTS), str(tmp),
                              input_names=list(INPUTS), output_names=["last_hidden_state"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        expected = st_model.encode(PROBES, convert_to_numpy=True, normalize_embeddings=True,
                                   show_progress_bar=False)
        got = OnnxEncoder(tmp, model_dir).encode(PROBES)
        diff = float(np.abs(expected - got).max())
        if diff > MAX_EXPORT_DIFF:
            raise RuntimeError(f"ONNX export of {model_id} differs from the original by {diff:.2e}")
        weights = weights_file(model_dir)
        meta = {"model_id": model_id, "weights_sha256": weights_digest(model_dir),
                "weights_size": weights.stat().st_size, "weights_mtime_ns": weights.stat().st_mtime_ns,
                "max_abs_diff": diff, "torch": torch.__version__}
        tmp.replace(path)
        path.with_suffix(".json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        log.info("exported %s to %s (max |Δ| %.1e against sentence-transformers)", model_id, path, diff)
        return path
    finally:
        tmp.unlink(missing_ok=True)
