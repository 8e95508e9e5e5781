"""L3 passes images to its endpoint as OpenAI content parts (issue 41), where the user says its
model reads them (l3.images): each image a data URL of the file as the user sent it, where it
stands in the text, earlier messages' images too. Where the user has not said so, a turn with
images sent there is refused in words before anything leaves the machine."""

from __future__ import annotations

import base64
import http.server
import io
import json
import threading

import pytest
from PIL import Image

from engine.api import InputError
from engine.chat.session import Message
from engine.chat.targets import content_parts, image_data_url, remote_message
from engine.inference.errors import NoVision
from engine.inference.remote import RemoteConfig
from tests.fake_backend import dones, fakes, make_assistant, send  # noqa: F401


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.linear_gradient("L").resize((48, 32)).convert("RGB").save(out, "JPEG", quality=80)
    return out.getvalue()


def test_content_parts_put_each_image_where_it_stands():
    m = Message("user", "before after", images=[{"digest": "b" * 64, "at": 7}, {"digest": "a" * 64, "at": 0}])
    parts = content_parts(m, lambda d: f"u:{d[0]}")
    assert parts == [{"type": "image_url", "image_url": {"url": "u:a"}}, {"type": "text", "text": "before "},
                     {"type": "image_url", "image_url": {"url": "u:b"}}, {"type": "text", "text": "after"}]
    rewritten = Message("user", "the text", model_text="[summarised] the text", images=[{"digest": "c" * 64, "at": 4}])
    assert [p["type"] for p in content_parts(rewritten, lambda d: "u")] == ["image_url", "text"]
    only = Message("user", "", images=[{"digest": "d" * 64, "at": 0}])
    assert [p["type"] for p in content_parts(only, lambda d: "u")] == ["image_url"]
    with pytest.raises(NoVision, match="l3.images"):
        remote_message(m)
    assert remote_message(Message("assistant", "text"))["content"] == "text"


class _Capture(http.server.BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):  # noqa: N802 - http.server API
        type(self).bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"choices":[{"delta":{"content":"A gradient."}}]}\n\n'
                         b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Capture.bodies = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_an_image_turn_on_l3_sends_data_urls_and_one_it_cannot_read_is_refused(fakes, make_assistant, endpoint):
    model = str(fakes.model_file("m"))
    data = jpeg()
    a = make_assistant(model, remote=RemoteConfig(endpoint, retries=0, images=True))
    digest = a.add_image(data, "photo.jpg")["digest"]
    assert a.vision_tiers() == ["L3"]
    cid = a.new_conversation()
    done = dones(send(a, cid, "What is this? And this text after.", route="L3",
                      images=[{"digest": digest, "at": 13}]))
    assert done[-1].level == "L3" and done[-1].text == "A gradient."
    user = _Capture.bodies[-1]["messages"][-1]
    assert [p["type"] for p in user["content"]] == ["text", "image_url", "text"]
    url = user["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,") and base64.b64decode(url.split(",", 1)[1]) == data
    assert url == image_data_url(digest)
    # the next turn resends the history: the earlier message's image goes again (the API is stateless)
    dones(send(a, cid, "Thanks.", route="L3"))
    earlier = _Capture.bodies[-1]["messages"][-3]
    assert earlier["role"] == "user" and earlier["content"][1]["image_url"]["url"] == url
    # an endpoint not said to read images: nothing is sent, and the user is told why
    b = make_assistant(model, remote=RemoteConfig(endpoint, retries=0))
    assert b.vision_tiers() == []
    before = len(_Capture.bodies)
    with pytest.raises(InputError, match="l3.images"):
        send(b, b.new_conversation(), "What is this?", route="L3", images=[digest])
    assert len(_Capture.bodies) == before
