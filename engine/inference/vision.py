"""A backend's images: its projector, the image spans it has tokenized, and their embeddings.

A prompt with images is tokenized once (mtmd: text ids, and per image its tiles) into one id
list where each tile is a media span (engine/inference/media.py). The backend evaluates a span
only when its KV cache lacks it: then the tile is encoded (the vision encoder, the costly part;
counted in `encodes`) and decoded at the span's positions. A chat that goes on, switches back or
comes back from disk finds its images already in the cache and encodes nothing.

Spans are kept by their first id with the mtmd chunks that can encode them (the last
PROMPTS_KEPT tokenized prompts) and their embeddings (EMBD_BYTES, least recently used first out),
so a span evicted from the cache in this process is decoded again without the encoder.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import numpy as np

from engine.inference import llama_seam
from engine.inference.errors import DecodeError, ModelLoadError
from engine.inference.llama_vision import TEXT, Projector, Prompt
from engine.inference.media import Pixels, span_ids

log = logging.getLogger(__name__)

PROMPTS_KEPT = 8
EMBD_BYTES = 64 << 20


class MediaMissing(DecodeError):
    """A prompt holds an image span this backend has no pixels for (tokenize it with its image)."""


class Vision:
    def __init__(self, model: llama_seam.Model, path, *, n_threads: int, use_gpu: bool = False):
        try:
            self.projector = Projector(model, path, n_threads=n_threads, use_gpu=use_gpu)
        except llama_seam.LoadFailed as exc:
            raise ModelLoadError(str(exc)) from exc
        # M-RoPE (Qwen2-VL, Qwen2.5-VL): a span's positions are not its length; Backend keeps them
        # (engine/inference/positions.py) from what each span took here.
        self.mrope = self.projector.mrope
        self.marker = self.projector.marker
        self.encodes = 0  # tiles through the vision encoder, for tests and the bench
        self._prompts: OrderedDict[int, Prompt] = OrderedDict()  # id(prompt) -> prompt, newest last
        self._spans: dict[int, tuple[Prompt, int]] = {}  # first media id -> (its prompt, piece index)
        self._embd: OrderedDict[int, np.ndarray] = OrderedDict()  # first media id -> embeddings
        self._embd_bytes = 0
        self._n_pos: dict[int, int] = {}  # first media id -> positions it takes (never dropped: ints)

    def tokenize(self, text: str, images: list[Pixels], special: bool = False) -> list[int]:
        """`text` with one marker per image into ids: text ids, and a media span per image tile."""
        try:
            prompt = self.projector.tokenize(text, images, special)
        except llama_seam.DecodeFailed as exc:
            raise DecodeError(str(exc)) from exc
        ids: list[int] = []
        for i, piece in enumerate(prompt.pieces):
            if piece.kind == TEXT:
                ids.extend(piece.ids)
                continue
            span = span_ids(f"{images[piece.image].digest}/{piece.tile}", piece.n_tokens)
            self._spans[span[0]] = (prompt, i)
            self._n_pos[span[0]] = piece.n_pos
            ids.extend(span)
        self._prompts[id(prompt)] = prompt
        while len(self._prompts) > PROMPTS_KEPT:
            _, old = self._prompts.popitem(last=False)
            self._forget(old)
        return ids

    def n_pos(self, first: int) -> int | None:
        """The positions the span starting with media id `first` takes, once it was tokenized here."""
        return self._n_pos.get(first)

    def decode(self, ctx: llama_seam.Context, span: list[int], n_past: int) -> None:
        """Evaluate one whole span at n_past, encoding its tile unless its embeddings are kept."""
        first = span[0]
        found = self._spans.get(first)
        if found is None:
            raise MediaMissing("an image in this prompt was not tokenized with its pixels on this model")
        prompt, index = found
        embd = self._embd.get(first)
        if embd is None:
            try:
                embd = prompt.encode(index)
            except llama_seam.DecodeFailed as exc:
                raise DecodeError(str(exc)) from exc
            self.encodes += 1
            self._keep(first, embd)
        else:
            self._embd.move_to_end(first)
        if len(embd) != len(span):
            raise DecodeError(f"an image span of {len(span)} ids has {len(embd)} embeddings")
        try:
            prompt.decode(index, embd, ctx, n_past)
        except llama_seam.DecodeFailed as exc:
            raise DecodeError(f"llama.cpp could not evaluate the image ({exc})") from exc

    def _keep(self, first: int, embd: np.ndarray) -> None:
        self._embd[first] = embd
        self._embd_bytes += embd.nbytes
        while self._embd_bytes > EMBD_BYTES and len(self._embd) > 1:
            _, old = self._embd.popitem(last=False)
            self._embd_bytes -= old.nbytes

    def _forget(self, prompt: Prompt) -> None:
        for first in [f for f, (p, _) in self._spans.items() if p is prompt]:
            del self._spans[first]
        prompt.close()

    def close(self) -> None:
        for prompt in self._prompts.values():
            prompt.close()
        self._prompts.clear()
        self._spans.clear()
        self.projector.close()
