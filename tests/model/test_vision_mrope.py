"""M-RoPE images through the Backend (Qwen2-VL's positions) on the synthetic Qwen2-VL pair
(tests/vision_model_mrope.py): an image of nx × ny embeddings takes max(nx, ny) positions, so the
text after it sits where llama.cpp's own mtmd helper puts it, not one position per id; a second
turn evaluates only its new text and encodes nothing, and agrees with the whole sequence from
scratch; a cut at the image's edge removes by position; a cache restored in a fresh backend keeps
its positions once the chat's images are tokenized there, and is refused (evaluated again)
before; context shifting is not offered."""

from __future__ import annotations

import numpy as np
import pytest

from engine.inference.backend import Backend, LoadParams
from engine.inference.generate import prefill
from engine.inference.media import spans
from tests.model.helpers import assert_logits_agree, forced_logits
from tests.model.test_vision_backend import TURN_1, TURN_2, pixels
from tests.vision_model_mrope import mrope_pair

pytestmark = pytest.mark.model
LOAD = LoadParams(n_ctx=1024, n_threads=1, n_batch=256)


@pytest.fixture(scope="module")
def pair(model_paths):
    return mrope_pair()


def vision_backend(pair) -> Backend:
    backend = Backend(pair[0], LOAD)
    backend.load_projector(pair[1])
    return backend


def first_turn(backend: Backend, image) -> list[int]:
    return backend.tokenize_images(TURN_1.format(marker=backend.vision.marker), [image], special=True)


def test_text_after_an_image_goes_on_from_its_positions_and_turn_two_reuses_it(pair):
    backend = vision_backend(pair)
    try:
        assert backend.vision.mrope
        image = pixels(112, 84)  # 4 × 3 merged patches: 12 ids at 4 positions
        first = first_turn(backend, image)
        (a, b), = spans(first)
        assert b - a == 12 and backend.vision.n_pos(first[a]) == 4
        prefill(backend, first)
        assert backend.kv_tokens == first and backend.vision.encodes == 1
        # The last text id's position: one per text id, 4 for the image (one per id would be 12).
        assert backend._ctx.pos_max() == len(first) - 12 + 4 - 1
        second = first + backend.tokenize(TURN_2, special=True)
        reused, _, complete = prefill(backend, second)
        assert complete and reused == len(first) and backend.vision.encodes == 1
        answer = backend.tokenize(" Blue and green.", special=False)
        got = forced_logits(backend, second, answer)
        fresh = vision_backend(pair)
        try:
            first_turn(fresh, image)
            ref = forced_logits(fresh, second, answer)
            assert_logits_agree(ref, got, "M-RoPE image chat: turn 2 reused against the whole sequence")
            assert float(np.abs(ref - got).max()) < 1e-4
        finally:
            fresh.close()
        # A cut at the image's end removes the text after it by position, and the text goes back.
        assert backend.keep_prefix(b) and backend._ctx.pos_max() == a  # an image's cells hold its start
        again = forced_logits(backend, second, answer)
        assert float(np.abs(again - got).max()) < 1e-4 and backend.vision.encodes == 1
        assert not backend.shift_out(2, 3)  # positions in three sections: no plain shift
    finally:
        backend.close()


def test_a_restored_m_rope_chat_keeps_its_positions_once_its_images_are_tokenized(pair):
    image = pixels(84, 84)  # 9 ids at 3 positions
    backend = vision_backend(pair)
    try:
        first = first_turn(backend, image)
        prefill(backend, first)
        state, ids = backend.save_sequence()
        second = first + backend.tokenize(TURN_2, special=True)
        answer = backend.tokenize(" Blue.", special=False)
        ref = forced_logits(backend, second, answer)
    finally:
        backend.close()
    restored = vision_backend(pair)  # a new process: the image not yet tokenized here
    try:
        assert not restored.restore_sequence((bytes(state), ids)) and restored.kv_tokens == []
        assert first_turn(restored, image) == first  # the chat's prompt, as the session renders it
        assert restored.restore_sequence((bytes(state), ids)) and restored.kv_tokens == first
        got = forced_logits(restored, second, answer)
        assert restored.vision.encodes == 0  # restored, not encoded again
        assert float(np.abs(ref - got).max()) < 1e-4
    finally:
        restored.close()
