"""An image chat through engine.api on the synthetic SmolVLM pair (tests/vision_model.py, found
beside its model as mmproj-<model>.gguf): the image is kept by digest, turn 2 evaluates only its
new text and encodes nothing, a restart restores the chat from the cold tier and encodes nothing,
and deleting the chat deletes its image. A model without vision says so."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from engine.api import Assistant, EngineConfig, InputError, TurnDone
from engine.config.paths import db_path
from engine.inference.backend import LoadParams
from engine.storage import Database
from tests import vision_model as vm
from tests.model.helpers import greedy, on_model
from tests.model.test_kv_tiers import OVERHEAD, SYSTEM

pytestmark = pytest.mark.model


def open_vlm(model) -> Assistant:
    return Assistant(Database(db_path()), EngineConfig(model=str(model), load=LoadParams(n_ctx=2048, n_threads=1)))


def send(a: Assistant, cid: int, text: str, **options) -> TurnDone:
    done = [e for e in a.send(cid, text, greedy(8), **options) if isinstance(e, TurnDone)]
    assert done
    return done[-1]


def photo() -> bytes:
    image = Image.linear_gradient("L").resize((100, 80)).convert("RGB")
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def encodes(a: Assistant) -> int:
    return on_model(a, lambda backend: backend.vision.encodes)


def test_an_image_chat_reuses_its_cache_across_turns_and_a_restart(assistant_home, model_paths):
    model, _ = vm.vision_pair()
    a = open_vlm(model)
    try:
        image = a.add_image(photo(), "gradient.jpg")
        assert (image["width"], image["height"], image["format"]) == (100, 80, "JPEG")
        assert a.image_path(image["digest"]).is_file()
        cid = a.new_conversation(SYSTEM)
        first = send(a, cid, "What is in this picture?", images=[image["digest"]])
        assert encodes(a) == 5  # 2 × 2 tiles and the overview
        assert first.stats.prompt_tokens_evaluated > 20  # the image's 20 embeddings among them
        second = send(a, cid, "And its colours?")
        new_text = len(a.vocab.tokenize("And its colours?", special=False))
        assert second.stats.prompt_tokens_evaluated <= new_text + OVERHEAD
        assert encodes(a) == 5
        user = a.transcript(cid)[0]
        assert user["images"] == [{"digest": image["digest"], "at": 0}]
    finally:
        a.close()
        a.db.close()
    b = open_vlm(model)  # a restart: the chat comes back from disk, its image inside the state
    try:
        third = send(b, cid, "Thanks!")
        assert third.stats.restored_from == "cold"
        assert third.stats.prompt_tokens_evaluated <= len(b.vocab.tokenize("Thanks!", special=False)) + OVERHEAD
        assert encodes(b) == 0
        b.delete_conversation(cid)
        assert b.image_path(image["digest"]) is None  # no other chat named it
    finally:
        b.close()
        b.db.close()


def test_images_are_refused_in_words_where_they_cannot_be_read(assistant_home, model_paths):
    a = Assistant(Database(db_path()), EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=2)))
    try:
        with pytest.raises(InputError, match="SVG"):
            a.add_image(b"<svg xmlns='http://www.w3.org/2000/svg'/>", "logo.svg")
        with pytest.raises(InputError, match="digest"):
            list(a.send(a.new_conversation(), "look", greedy(4), images=["not-a-digest"]))
        image = a.add_image(photo())
        cid = a.new_conversation()
        with pytest.raises(InputError, match="cannot read images"):
            send(a, cid, "What is this?", images=[image["digest"]])
    finally:
        a.close()
        a.db.close()


def test_the_openai_client_sends_a_data_url_image_and_a_resent_history_reuses_it(assistant_home, model_paths):
    import base64

    from openai import BadRequestError, OpenAI

    from engine.server import ApiServer, ServerConfig

    model, _ = vm.vision_pair()
    a = open_vlm(model)
    vision = on_model(a, lambda backend: backend.vision)  # its counter, read while the server owns `a`
    vision_vocab = a.vocab
    server = ApiServer(a, ServerConfig(host="127.0.0.1", port=0, api_key="k" * 24)).start()
    try:
        c = OpenAI(base_url=server.url, api_key="k" * 24, max_retries=0, timeout=120)
        url = "data:image/jpeg;base64," + base64.b64encode(photo()).decode()
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                                 {"type": "image_url", "image_url": {"url": url}}]}]
        r = c.chat.completions.create(model="L1", messages=messages, temperature=0, max_tokens=8)
        assert vision.encodes == 5 and r.usage.prompt_tokens > 20
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "And its colours?"}]
        r2 = c.chat.completions.create(model="L1", messages=messages, temperature=0, max_tokens=8)
        evaluated = r2.usage.prompt_tokens - r2.usage.prompt_tokens_details.cached_tokens
        assert evaluated <= len(vision_vocab.tokenize("And its colours?", special=False)) + OVERHEAD
        assert vision.encodes == 5  # the resent image matched by its bytes: the same conversation
        for bad, words in (({"url": "https://example.com/cat.png"}, "data: URL"),
                           ({"url": "data:image/png;base64,!!!"}, "base64"),
                           ({"url": "data:image/png;base64," + base64.b64encode(b"not a png").decode()}, "image")):
            with pytest.raises(BadRequestError, match=words):
                parts = [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": bad}]
                c.chat.completions.create(model="L1", max_tokens=4, messages=[{"role": "user", "content": parts}])
    finally:
        server.stop()
        a.close()
        a.db.close()


def test_an_image_turn_goes_to_the_tier_that_reads_images(assistant_home, model_paths):
    model, _ = vm.vision_pair()
    config = EngineConfig(tiers={"L1": str(model), "L2": "demo-small"}, load=LoadParams(n_ctx=2048, n_threads=1))
    a = Assistant(Database(db_path()), config)
    try:
        image = a.add_image(photo())
        # A complex question the router sends up (L3, else L2); its image sends it to L1, which reads it.
        done = send(a, a.new_conversation(), "Explain step by step, in detail, how to analyse this chart "
                    "and compare its trends over the years with a careful argument.", images=[image["digest"]],
                    cascade=False)
        assert done.level == "L1"
    finally:
        a.close()
        a.db.close()
