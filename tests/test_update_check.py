"""The update check (issue 43) against a fake release server on 127.0.0.1: a good manifest, a bad
signature, a downgrade and a replay, a manifest for another system, a slow server, garbage; and off
until the user allows it. Real Ed25519 keys, real HTTP through httpx."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.api import Settings, check_for_update, update_channel, update_due
from engine.update.check import CHANNEL_FILE, Channel, check, system_key
from engine.update.manifest import ManifestError, new_private_key, public_key_of, sign, verify
from tests.util import packaging_module

KEY = new_private_key()
OTHER_KEY = new_private_key()
SHA = "ab" * 32


def manifest(version="0.2.0", systems=("linux-x86_64",), **extra) -> dict:
    return {"format": 1, "version": version, "published": "2026-12-05",
            "notes": {"en": f"What is new in {version}", "zh_CN": f"{version} 的新功能"},
            "installers": {s: {"url": f"https://example.org/{s}/{version}", "sha256": SHA, "size": 1000}
                           for s in systems}, **extra}


class ReleaseServer:
    """Serves `body` at /update.json; `delay_s` between bytes makes it slow; `requests` keeps the headers."""

    def __init__(self):
        self.body, self.delay_s, self.status, self.requests = b"", 0.0, 200, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                server.requests.append(dict(self.headers))
                self.send_response(server.status)
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                for i in range(0, len(server.body), 64):
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    try:
                        self.wfile.write(server.body[i:i + 64])
                        self.wfile.flush()
                    except OSError:
                        return

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/update.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = ReleaseServer()
    yield s
    s.close()


@pytest.fixture
def chan(server):
    return Channel(server.url, [public_key_of(KEY)])


def test_a_newer_signed_release_for_this_system_is_offered(server, chan):
    server.body = sign(manifest("0.2.0"), KEY)
    outcome = check(chan, "0.1.0", system="linux-x86_64", language="zh_CN")
    assert outcome.offer is not None and outcome.reason == "" and outcome.seen == "0.2.0"
    assert outcome.offer.version == "0.2.0" and outcome.offer.notes == "0.2.0 的新功能"
    assert outcome.offer.url == "https://example.org/linux-x86_64/0.2.0" and outcome.offer.sha256 == SHA
    # what the server learns: the app's version, nothing about the user
    assert server.requests[-1]["User-Agent"] == "offline-assistant/0.1.0"
    assert not any(k.lower() in ("cookie", "authorization") for k in server.requests[-1])


def test_a_bad_signature_offers_nothing(server, chan, caplog):
    server.body = sign(manifest("9.0.0"), OTHER_KEY)  # a well-formed manifest signed by someone else
    outcome = check(chan, "0.1.0", system="linux-x86_64")
    assert outcome.offer is None and "signature does not match" in outcome.reason and outcome.seen == ""
    # a payload changed after signing
    envelope = json.loads(sign(manifest("0.2.0"), KEY))
    envelope["payload"] = json.loads(sign(manifest("9.0.0"), KEY))["payload"]
    server.body = json.dumps(envelope).encode()
    assert "signature does not match" in check(chan, "0.1.0", system="linux-x86_64").reason
    assert "update check failed" in caplog.text  # the log has it; the user sees nothing


def test_a_downgrade_and_a_replayed_older_manifest_offer_nothing(server, chan):
    server.body = sign(manifest("0.1.0"), KEY)
    outcome = check(chan, "0.1.0", system="linux-x86_64")
    assert outcome.offer is None and "no update" in outcome.reason
    server.body = sign(manifest("0.0.9"), KEY)
    assert check(chan, "0.1.0", system="linux-x86_64").offer is None
    # 0.3.0 was seen before; an old 0.2.0 served again (a replay) is no news, though newer than this app
    server.body = sign(manifest("0.2.0"), KEY)
    outcome = check(chan, "0.1.0", system="linux-x86_64", newest_seen="0.3.0")
    assert outcome.offer is None and "older than 0.3.0" in outcome.reason and outcome.seen == "0.3.0"


def test_a_release_for_another_system_offers_nothing(server, chan):
    server.body = sign(manifest("0.2.0", systems=("windows-x86_64", "macos-arm64")), KEY)
    outcome = check(chan, "0.1.0", system="linux-x86_64")
    assert outcome.offer is None and "no installer for linux-x86_64" in outcome.reason
    assert check(chan, "0.1.0", system="macos-arm64").offer.url.endswith("macos-arm64/0.2.0")


def test_a_slow_server_is_given_up_on(server, chan):
    server.body, server.delay_s = sign(manifest("0.2.0"), KEY), 0.2  # ~2 KB in 64-byte steps: ~7 s
    started = time.monotonic()
    outcome = check(chan, "0.1.0", system="linux-x86_64", timeout_s=1.0)
    assert outcome.offer is None and "TimeoutError" in outcome.reason
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("body, why", [
    (b"<html>captive portal</html>", "not JSON"),
    (b'{"payload": 1}', "not a signed manifest"),
    (b'{"payload": "%%%", "signature": "AA=="}', "not base64"),
    (b"\xff\xfe" * 40, "not JSON"),
    (b"[" * 300_000, "more than"),  # bigger than any manifest
])
def test_garbage_offers_nothing(server, chan, body, why):
    server.body = body
    outcome = check(chan, "0.1.0", system="linux-x86_64")
    assert outcome.offer is None and why in outcome.reason


def test_an_error_status_and_a_closed_port_offer_nothing(server, chan):
    server.status, server.body = 404, b"not found"
    assert "404" in check(chan, "0.1.0", system="linux-x86_64").reason
    closed = Channel("http://127.0.0.1:9/update.json", chan.public_keys)
    assert "ConnectError" in check(closed, "0.1.0", system="linux-x86_64").reason


def test_plain_http_to_another_machine_and_http_installer_links_are_refused(chan):
    far = Channel("http://example.org/update.json", chan.public_keys)
    assert "https" in check(far, "0.1.0").reason
    with pytest.raises(ManifestError, match="https url"):
        sign({**manifest(), "installers": {"linux-x86_64": {"url": "http://x", "sha256": SHA, "size": 1}}}, KEY)
    with pytest.raises(ManifestError, match="bad version"):
        sign(manifest("next week"), KEY)
    assert verify(sign(manifest(), KEY), [public_key_of(OTHER_KEY), public_key_of(KEY)]).installers  # a rotated key


def test_off_until_the_user_allows_it_and_then_once_a_day(server, assistant_home):
    settings = Settings(assistant_home / "settings.json")
    assert settings.get("updates.check") == "ask" and not update_due(settings)
    settings.set("updates.check", "off")
    assert not update_due(settings)
    settings.set("updates.check", "on")
    assert update_due(settings)
    server.body = sign(manifest("0.2.0"), KEY)
    chan = Channel(server.url, [public_key_of(KEY)])
    outcome = check_for_update(settings, chan=chan, current="0.1.0", system="linux-x86_64")
    assert outcome.offer.version == "0.2.0" and settings.get("updates.newest_seen") == "0.2.0"
    assert not update_due(settings)  # it ran just now
    assert update_due(settings, now=time.time() + 25 * 3600)
    assert len(server.requests) == 1


def test_the_channel_comes_with_the_build(tmp_path, assistant_home):
    assert update_channel(tmp_path) is None  # a checkout or a build without a key
    settings = Settings(assistant_home / "settings.json")
    assert check_for_update(settings, chan=None).reason == "this build has no update channel"
    (tmp_path / CHANNEL_FILE).write_text(json.dumps({"url": "https://example.org/u.json",
                                                     "public_keys": [public_key_of(KEY)]}))
    assert update_channel(tmp_path) == Channel("https://example.org/u.json", [public_key_of(KEY)])
    (tmp_path / CHANNEL_FILE).write_text("{broken")
    assert update_channel(tmp_path) is None


def test_system_names():
    assert system_key("Windows", "AMD64") == "windows-x86_64"
    assert system_key("Darwin", "arm64") == "macos-arm64"
    assert system_key("Linux", "aarch64") == "linux-aarch64"
    assert system_key("Linux", "x86_64") == "linux-x86_64"


def test_the_build_tools_write_a_channel_and_a_manifest_the_app_accepts(server, tmp_path, monkeypatch):
    update_manifest = packaging_module("update_manifest")
    built = tmp_path / "build" / CHANNEL_FILE
    update_manifest.write_channel({"UPDATE_MANIFEST_URL": server.url, "UPDATE_SIGNING_KEY": KEY}, built)
    chan = update_channel(built.parent)
    assert chan == Channel(server.url, [public_key_of(KEY)])
    update_manifest.write_channel({"UPDATE_MANIFEST_URL": server.url}, built)  # no key: no channel, none left
    assert update_channel(built.parent) is None and not built.exists()
    deb = tmp_path / "offline-assistant_0.3.0_amd64.deb"
    deb.write_bytes(b"x" * 5000)
    notes = tmp_path / "NOTES.md"
    notes.write_text("Faster answers.")
    out = tmp_path / "update.json"
    monkeypatch.setenv("UPDATE_SIGNING_KEY", KEY)
    assert update_manifest.main(["sign", "--version", "0.3.0", "--notes-file", str(notes), "--installer",
                                 f"linux-x86_64={deb}@https://example.org/{deb.name}", "--out", str(out)]) == 0
    server.body = out.read_bytes()
    offer = check(chan, "0.1.0", system="linux-x86_64").offer
    assert offer.version == "0.3.0" and offer.notes == "Faster answers." and offer.size == 5000
    assert offer.sha256 == hashlib.sha256(deb.read_bytes()).hexdigest()
    monkeypatch.delenv("UPDATE_SIGNING_KEY")
    assert update_manifest.main(["sign", "--version", "0.3.0", "--out", str(out)]) == 2  # no key: refused


def test_the_selftest_step_signs_verifies_and_refuses():
    from engine.api import update_self_check

    assert update_self_check() == {"ok": True, "channel": None}  # a checkout carries no channel


def test_a_remembered_version_that_is_not_one_is_ignored(server, chan):
    server.body = sign(manifest("0.2.0"), KEY)  # settings hand-edited: updates.newest_seen = "latest"
    outcome = check(chan, "0.1.0", system="linux-x86_64", newest_seen="latest")
    assert outcome.offer.version == "0.2.0" and outcome.seen == "0.2.0"
