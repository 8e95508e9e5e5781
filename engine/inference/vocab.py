"""`VocabTokenizer`: a model's vocabulary alone, exact tokens from any thread."""

from __future__ import annotations

import threading
from pathlib import Path

from engine.inference import llama_seam as llama
from engine.inference.errors import ModelLoadError


def model_identity(path: str | Path) -> str:
    """What a model's token ids are stored under: valid across processes for the same file, whose
    name and size identify it cheaply."""
    path = Path(path)
    return f"{path.name}:{path.stat().st_size}"


class VocabTokenizer:
    """A model's vocabulary alone (no weights, no context): exact tokens from any thread.

    It shares no state with a model's `Backend` (no context, no caches), so tokenizing never waits
    for, or races with, the model's own thread. Every call holds one lock: close() must not free
    the vocabulary under a call, and the caches are shared.

    `VocabTokenizer(path)` loads the GGUF's vocabulary alone (the GUI's token counter, before and
    across model loads): a few hundred ms for a 262k-token vocabulary, do it off the GUI thread.
    `Backend.vocab` is `of_model`: the loaded model's own `llama_vocab`, no second load (that
    doubled a demo model's load time). llama.cpp's model, vocabulary included, is read-only once
    loaded and made to be shared across threads (its contexts are not: those stay the model
    thread's); llama-server tokenizes on its HTTP threads while its loop decodes, the same way.

    Raises:
        ModelLoadError: the file cannot be read as a GGUF vocabulary.
    """

    def __init__(self, path: str | Path):
        try:
            with llama.LoadLog():  # keeps llama.cpp's load chatter off stdout/stderr
                model = llama.Model(path, vocab_only=True)
        except llama.LoadFailed as exc:
            raise ModelLoadError(f"could not read the vocabulary of {Path(path).name}") from exc
        self._setup(path, model, model.vocab)

    @classmethod
    def of_model(cls, path: str | Path, model: llama.Model) -> "VocabTokenizer":
        """The vocabulary of a model already loaded from `path`, not freed by close(): the model's
        owner closes this first, then frees the model. It holds the model, so a backend dropped
        without close() cannot free the vocabulary under a tokenizer another thread still uses."""
        self = cls.__new__(cls)
        self._setup(path, None, model.vocab)
        self._loaded = model
        return self

    def _setup(self, path: str | Path, model: llama.Model | None, vocab) -> None:
        self.path = Path(path)
        self._own_model = model  # ours to free, or None: the vocabulary is a loaded model's
        self._loaded = None  # that loaded model (of_model), kept alive while this is open
        self._vocab = vocab
        self._lock = threading.Lock()
        self.identity = model_identity(self.path)
        facts = llama.vocab_facts(vocab)
        self.bos_id, self.eos_id, self.add_bos = facts["bos_id"], facts["eos_id"], facts["add_bos"]
        self._control_cache: dict[str, list[int]] = {}
        self._piece_cache: dict[int, bytes] = {}

    def _open(self):
        if self._vocab is None:
            raise ValueError("tokenizer closed")
        return self._vocab

    def count(self, text: str) -> int:
        """Tokens of `text` as message content (control-token text counts as plain text)."""
        data = text.encode("utf-8", errors="replace")
        if not data:
            return 0
        with self._lock:
            return llama.count_tokens(self._open(), data)

    def tokenize(self, text: str, special: bool) -> list[int]:
        """As `Backend.tokenize`: no BOS added; `special=False` treats control-token text as plain text."""
        data = text.encode("utf-8", errors="replace")
        if not data:
            return []
        with self._lock:
            return llama.tokenize(self._open(), data, special)

    def tokenize_control(self, text: str) -> list[int]:
        """Template control text (special tokens parsed); cached, the same few strings recur."""
        with self._lock:
            ids = self._control_cache.get(text)
            if ids is None:
                data = text.encode("utf-8", errors="replace")
                ids = self._control_cache[text] = llama.tokenize(self._open(), data, True)
            return list(ids)

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for (control tokens render empty); may be a partial UTF-8 char."""
        with self._lock:
            piece = self._piece_cache.get(token)
            if piece is None:
                piece = self._piece_cache[token] = llama.token_piece(self._open(), token)
            return piece

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        with self._lock:
            return llama.is_eog(self._open(), token)

    def close(self) -> None:
        with self._lock:
            if self._own_model is not None:
                self._own_model.close()
            self._own_model = self._vocab = self._loaded = None
