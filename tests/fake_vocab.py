"""The fake backend's vocabulary (tests/fake_backend.py): ids 0-255 are bytes; four control tokens
follow (ChatML's markers, BOS, EOS), so prompts are plain readable bytes. And a tiny real GGUF the
planner can read, for the fake models' files."""

from __future__ import annotations

import re
from pathlib import Path

import gguf
import numpy as np

BOS, EOS, IM_START, IM_END = 256, 257, 258, 259
SPECIAL = {"<s>": BOS, "</s>": EOS, "<|im_start|>": IM_START, "<|im_end|>": IM_END}
SPECIAL_TEXT = {v: k for k, v in SPECIAL.items()}
N_VOCAB = 260
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL) + ")")


def write_tiny_gguf(path: Path, context_length: int = 8192, n_layers: int = 2, instruct: bool = True) -> Path:
    """A well-formed GGUF of a few KB with the metadata the planner reads (no usable weights).
    `instruct`: it carries a chat template, as instruction-tuned GGUFs do (base ones don't)."""
    w = gguf.GGUFWriter(str(path), "llama")
    if instruct:
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    w.add_block_count(n_layers)
    w.add_context_length(context_length)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_tensor("token_embd.weight", np.zeros((N_VOCAB, 64), dtype=np.float16))
    for i in range(n_layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---- scripted answers

def _tokenize(text: str, special: bool) -> list[int]:
    if not text:
        return []
    if not special:
        return list(text.encode("utf-8", errors="replace"))
    ids: list[int] = []
    for part in _SPECIAL_RE.split(text):
        ids.extend([SPECIAL[part]] if part in SPECIAL else part.encode("utf-8", errors="replace"))
    return ids


def _token_bytes(token: int) -> bytes:
    return bytes([token]) if 0 <= token < 256 else b""  # control tokens render empty


def _detokenize(tokens: list[int]) -> str:
    return b"".join(_token_bytes(t) for t in tokens).decode("utf-8", errors="replace")


class FakeVocab:
    """Duck-types `VocabTokenizer`: the fake vocabulary, for any thread (`FakeBackend.vocab`)."""

    def __init__(self, identity: str, add_bos: bool):
        self.identity, self.add_bos, self.bos_id, self.eos_id = identity, add_bos, BOS, EOS

    @staticmethod
    def tokenize(text: str, special: bool) -> list[int]:
        return _tokenize(text, special)

    @staticmethod
    def tokenize_control(text: str) -> list[int]:
        return _tokenize(text, special=True)

    @staticmethod
    def token_bytes(token: int) -> bytes:
        return _token_bytes(token)

    @staticmethod
    def detokenize(tokens: list[int]) -> str:
        return _detokenize(tokens)

    @staticmethod
    def is_eog(token: int) -> bool:
        return token in (EOS, IM_END)

    def count(self, text: str) -> int:
        return len(_tokenize(text, special=False))

    def close(self) -> None:
        pass
