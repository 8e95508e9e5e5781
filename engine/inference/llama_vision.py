"""llama.cpp's mtmd (images) for the seam (engine/inference/llama_seam.py): a projector loaded
beside its model, a prompt with image markers split into text and image chunks, an image chunk
encoded to embeddings and those decoded into a context at our positions.

It reads mtmd through the seam's handle (`llama_seam.mtmd()`), never importing llama_cpp itself;
tests/test_llama_vision.py pins each binding used here. A projector, like a context, belongs to
its model's thread. Pixels come in as packed RGB (engine/inference/images.py decodes files).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from engine.inference import llama_seam
from engine.inference.llama_seam import DecodeFailed, LoadFailed
from engine.inference.media import Pixels

TEXT, IMAGE = 0, 1  # enum mtmd_input_chunk_type


@dataclass(frozen=True)
class Piece:
    """One chunk of a tokenized prompt: text ids, or an image tile of `n_tokens` embeddings that
    advance the position by `n_pos` (≠ n_tokens only under M-RoPE). `image` indexes the images
    passed in, `tile` counts that image's chunks (idefics3 cuts one image into tiles + an overview)."""

    kind: int
    ids: tuple[int, ...] = ()
    n_tokens: int = 0
    n_pos: int = 0
    image: int = -1
    tile: int = -1


class Projector:
    """An mmproj file on its model: mtmd_init_from_file refuses one whose width does not match."""

    def __init__(self, model: llama_seam.Model, path, *, n_threads: int, use_gpu: bool = False):
        M = llama_seam.mtmd()
        _route_log(M)
        p = M.mtmd_context_params_default()
        p.use_gpu, p.n_threads, p.print_timings, p.warmup = use_gpu, n_threads, False, False
        self.ptr = M.mtmd_init_from_file(str(path).encode("utf-8"), model.ptr, p)
        if not self.ptr:
            raise LoadFailed(f"llama.cpp could not load the projector {path} for this model "
                             "(not an mmproj file, or made for another model: its width differs)")
        if not M.mtmd_support_vision(self.ptr):
            self.close()
            raise LoadFailed(f"{path} is not a vision projector (audio only)")
        self.marker = M.mtmd_default_marker().decode("utf-8")
        self.mrope = bool(M.mtmd_decode_use_mrope(self.ptr))
        self.n_embd = llama_seam.n_embd_inp(model)  # what the encoder yields per image token
        self._M = M
        model._contexts.append(self)  # freed before its model (mtmd reads the model's vocabulary)

    def tokenize(self, text: str, images: list[Pixels], special: bool) -> Prompt:
        """`text` with one `marker` per image, in order, into chunks; `special`: special tokens'
        text parsed as them (a template's control text), or not (what a user wrote). No BOS: the
        template holds it. The markers mtmd puts around each image are its own."""
        M = self._M
        if text.count(self.marker) != len(images):
            raise ValueError(f"{text.count(self.marker)} image markers for {len(images)} images")
        bitmaps = []
        try:
            for px in images:
                data = (ctypes.c_uint8 * len(px.rgb)).from_buffer_copy(px.rgb)
                bmp = M.mtmd_bitmap_init(px.width, px.height, data)
                if not bmp:
                    raise DecodeFailed(f"mtmd could not take a {px.width} × {px.height} image")
                bitmaps.append(bmp)
                M.mtmd_bitmap_set_id(bmp, f"{len(bitmaps) - 1}:{px.digest}".encode())  # tiles share it
            chunks = M.mtmd_input_chunks_init()
            raw = text.encode("utf-8")
            inp = M.mtmd_input_text(raw, len(raw), False, special)
            array = (M.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            code = M.mtmd_tokenize(self.ptr, chunks, ctypes.byref(inp), array, len(bitmaps))
            if code != 0:
                M.mtmd_input_chunks_free(chunks)
                raise DecodeFailed("mtmd could not read the image" if code == 2 else f"mtmd_tokenize returned {code}")
        finally:
            for bmp in bitmaps:  # the chunks keep what they need
                M.mtmd_bitmap_free(bmp)
        return Prompt(self, chunks)

    def close(self) -> None:
        if getattr(self, "ptr", None):
            self._M.mtmd_free(self.ptr)
        self.ptr = None


_log_routed = False


def _route_log(M) -> None:
    """mtmd's log (a line per image tile encoded) through llama.cpp's, which the seam keeps off
    stderr unless asked (llama_seam.set_verbose); once per process."""
    global _log_routed
    if not _log_routed:
        M.mtmd_log_set(llama_seam._log_callback, None)
        M.mtmd_helper_log_set(llama_seam._log_callback, None)
        _log_routed = True


class Prompt:
    """mtmd's chunks of one tokenized prompt; owns them until `close()`."""

    def __init__(self, projector: Projector, chunks):
        self._proj, self._M, self._chunks = projector, projector._M, chunks
        self.pieces = self._read()

    def _read(self) -> list[Piece]:
        M, out, last, tile = self._M, [], -1, 0
        for i in range(M.mtmd_input_chunks_size(self._chunks)):
            chunk = M.mtmd_input_chunks_get(self._chunks, i)
            if M.mtmd_input_chunk_get_type(chunk) == TEXT:
                n = ctypes.c_size_t()
                ptr = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                out.append(Piece(TEXT, ids=tuple(ptr[j] for j in range(n.value))))
                continue
            image = int(M.mtmd_input_chunk_get_id(chunk).split(b":", 1)[0])  # the index tokenize gave it
            tile, last = (tile + 1 if image == last else 0), image
            out.append(Piece(IMAGE, n_tokens=int(M.mtmd_input_chunk_get_n_tokens(chunk)),
                             n_pos=int(M.mtmd_input_chunk_get_n_pos(chunk)), image=image, tile=tile))
        return out

    def encode(self, index: int) -> np.ndarray:
        """Image piece `index` through the vision encoder: n_tokens × n_embd float32 (a copy:
        mtmd reuses its buffer)."""
        M = self._M
        chunk = M.mtmd_input_chunks_get(self._chunks, index)
        if M.mtmd_encode_chunk(self._proj.ptr, chunk) != 0:
            raise DecodeFailed("mtmd could not encode the image")
        n = self.pieces[index].n_tokens
        ptr = M.mtmd_get_output_embd(self._proj.ptr)
        flat = np.ctypeslib.as_array(ptr, shape=(n * self.n_embd,))
        return flat.reshape(n, self.n_embd).copy()

    @property
    def n_embd(self) -> int:
        return self._proj.n_embd

    def decode(self, index: int, embd: np.ndarray, ctx: llama_seam.Context, n_past: int) -> int:
        """Decode image piece `index`'s embeddings into `ctx` at n_past (sequence 0, in batches of
        the context's n_batch; causal attention off for it where the model wants that); returns the
        position after it."""
        M = self._M
        chunk = M.mtmd_input_chunks_get(self._chunks, index)
        embd = np.ascontiguousarray(embd, dtype=np.float32)
        new_past = llama_seam.position()
        code = M.mtmd_helper_decode_image_chunk(
            self._proj.ptr, ctx.ptr, chunk, embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n_past, 0,
            ctx.n_batch, ctypes.byref(new_past), M.mtmd_helper_post_decode_callback(), None)  # no callback: NULL
        if code != 0:
            raise DecodeFailed(f"mtmd_helper_decode_image_chunk returned {code}")
        return int(new_past.value)

    def close(self) -> None:
        if self._chunks:
            self._M.mtmd_input_chunks_free(self._chunks)
        self._chunks = None

    def __del__(self) -> None:
        if getattr(self, "_chunks", None) and self._proj.ptr:
            self.close()
