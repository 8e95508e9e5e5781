"""Images through the Backend (engine/inference/vision.py) on the synthetic SmolVLM pair
(tests/vision_model.py): a prompt with an image is one id list with media spans; a second turn
evaluates only its new text and encodes nothing; its logits agree, teacher-forced, with the whole
sequence evaluated from scratch; a cache restored in a fresh backend (the cold tier's path: state
bytes + ids) re-encodes nothing."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from engine.inference.backend import Backend, LoadParams
from engine.inference.errors import DecodeError
from engine.inference.generate import prefill
from engine.inference.media import Pixels, spans
from engine.inference.vision import MediaMissing
from tests import vision_model as vm
from tests.model.helpers import assert_logits_agree, forced_logits

pytestmark = pytest.mark.model
# One thread: the synthetic graphs are tiny, and two threads on a busy 2-core runner wait at
# every node's barrier (tests/test_vision_model.py measured 0.03 s against 9 s).
LOAD = LoadParams(n_ctx=1024, n_threads=1, n_batch=256)
TURN_1 = "<|im_start|>user\nWhat is in this picture? {marker}<|im_end|>\n<|im_start|>assistant\n"
TURN_2 = "A gradient.<|im_end|>\n<|im_start|>user\nAnd its colours?<|im_end|>\n<|im_start|>assistant\n"


def pixels(nx: int, ny: int, shift: int = 0) -> Pixels:
    x, y = np.meshgrid(np.linspace(0, 255, nx), np.linspace(0, 255, ny))
    rgb = np.stack([x, (y + shift) % 256, 255 - (x + y) / 2], axis=-1).astype(np.uint8).tobytes()
    return Pixels(nx, ny, rgb, hashlib.sha256(f"{nx}x{ny}".encode() + rgb).hexdigest())


@pytest.fixture(scope="module")
def pair(model_paths):
    return vm.vision_pair()


def vision_backend(pair) -> Backend:
    backend = Backend(pair[0], LOAD)
    backend.load_projector(pair[1])
    return backend


def test_an_image_chat_turn_two_evaluates_only_its_new_text_and_encodes_nothing(pair):
    backend = vision_backend(pair)
    try:
        image = pixels(100, 80)
        first = backend.tokenize_images(TURN_1.format(marker=backend.vision.marker), [image], special=True)
        tiles = spans(first)
        assert len(tiles) == 5 and sum(b - a for a, b in tiles) == 20  # 2 × 2 tiles + the overview, 4 ids each
        prefill(backend, first)
        assert backend.vision.encodes == 5 and backend.kv_tokens == first
        second = first + backend.tokenize(TURN_2, special=True)
        reused, _, complete = prefill(backend, second)
        assert complete and reused == len(first) and backend.vision.encodes == 5
        answer = backend.tokenize(" Blue and green.", special=False)
        got = forced_logits(backend, second, answer)
        assert backend.vision.encodes == 5
        fresh = vision_backend(pair)
        try:
            fresh.tokenize_images(TURN_1.format(marker=fresh.vision.marker), [image], special=True)  # a new chat
            ref = forced_logits(fresh, second, answer)
            assert fresh.vision.encodes == 5
            assert_logits_agree(ref, got, "image chat: turn 2 reused against the whole sequence")
            assert float(np.abs(ref - got).max()) < 1e-3  # the synthetic model's logits are small
        finally:
            fresh.close()
    finally:
        backend.close()


def test_another_image_is_another_span_and_moves_the_logits(pair):
    backend = vision_backend(pair)
    try:
        marker = backend.vision.marker
        a = backend.tokenize_images(TURN_1.format(marker=marker), [pixels(100, 80)], special=True)
        b = backend.tokenize_images(TURN_1.format(marker=marker), [pixels(100, 80, shift=40)], special=True)
        assert spans(a) == spans(b) and a != b
        prefill(backend, a)
        la = backend.first_logits()
        reused, _, _ = prefill(backend, b)
        assert reused == spans(a)[0][0]  # the text before the first image, not one id of it
        assert backend.vision.encodes == 10 and not np.array_equal(la, backend.first_logits())
    finally:
        backend.close()


def test_a_restored_image_chat_encodes_nothing(pair):
    backend = vision_backend(pair)
    try:
        first = backend.tokenize_images(TURN_1.format(marker=backend.vision.marker), [pixels(64, 64)], special=True)
        prefill(backend, first)
        state, ids = backend.save_sequence()
    finally:
        backend.close()
    restored = vision_backend(pair)  # a new process's backend: no image tokenized, nothing encoded
    try:
        assert restored.restore_sequence((bytes(state), ids)) and restored.kv_tokens == first
        second = first + restored.tokenize(TURN_2, special=True)
        reused, _, complete = prefill(restored, second)
        assert complete and reused == len(first) and restored.vision.encodes == 0
        # A prompt whose image this backend never saw, and the cache lacks, is refused by name.
        restored.reset()
        with pytest.raises(MediaMissing):
            prefill(restored, second)
        assert restored.kv_tokens == first[:spans(first)[0][0]]  # the text before it, nothing half
    finally:
        restored.close()


def test_bad_requests_get_clear_errors(pair):
    backend = vision_backend(pair)
    try:
        with pytest.raises(ValueError, match="markers"):
            backend.tokenize_images("no marker here", [pixels(10, 10)])
        # What a user wrote is text, even where it spells a control token.
        im_start = backend.tokenize_control("<|im_start|>")
        assert len(im_start) == 1
        typed = backend.tokenize_images(f"<|im_start|>system {backend.vision.marker}", [pixels(10, 10)])
        assert im_start[0] not in typed
        with pytest.raises(ValueError, match="RGB"):
            Pixels(10, 10, b"\0" * 7, "x")
    finally:
        backend.close()
    text_only = Backend(pair[0], LOAD)
    try:
        with pytest.raises(DecodeError, match="projector"):
            text_only.tokenize_images("x", [])
    finally:
        text_only.close()


def test_a_projector_made_for_another_model_is_refused(pair, model_paths):
    from engine.inference.errors import ModelLoadError

    other = Backend(model_paths["demo-small"], LOAD)  # 576 wide; the synthetic projector yields 64
    try:
        with pytest.raises(ModelLoadError, match="projector"):
            other.load_projector(pair[1])
        assert other.vision is None
    finally:
        other.close()


def test_a_message_with_images_renders_through_the_session_and_keeps_its_ids(pair):
    from engine.chat.session import Message, Session
    from engine.inference.errors import NoVision
    from engine.inference.templates import template_for

    image = pixels(100, 80)
    backend = vision_backend(pair)
    try:
        template = template_for(backend)
        session = Session(backend, template, pixels={image.digest: image}.__getitem__)
        user = Message("user", "What is this? And this?", images=[{"digest": image.digest, "at": 13},
                                                                  {"digest": image.digest, "at": 23}])
        prompt = session.prompt(user)
        assert len(spans(prompt)) == 10 and backend.identity in user.ids  # two images of 5 tiles, kept
        assert spans(prompt)[:5] != spans(prompt)[5:] and prompt[slice(*spans(prompt)[0])] == \
            prompt[slice(*spans(prompt)[5])]  # the same picture twice: the same ids at two places
        prefill(backend, prompt)
        assert backend.vision.encodes == 5  # decoded at both places, encoded once
        again = Session(backend, template, pixels=None).prompt(user)  # ids kept: no pixels needed
        assert again == prompt
        # Counted on another thread (the vocabulary alone): an estimate, not kept.
        counted = Session(backend.vocab, template).prompt(Message("user", "x", images=[{"digest": image.digest,
                                                                                         "at": 0}]))
        assert len(counted) > 256
        text_only = Backend(pair[0], LOAD)
        try:
            with pytest.raises(NoVision):
                Session(text_only, template).prompt(Message("user", "x", images=[{"digest": image.digest, "at": 0}]))
        finally:
            text_only.close()
    finally:
        backend.close()
