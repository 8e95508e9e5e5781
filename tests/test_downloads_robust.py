"""Downloads when things go wrong: a dropped connection, a stalled one, a cancel, a full disk, a server
that ignores Range, a captive portal's HTML page, a gated or missing file. Fake hubs on 127.0.0.1
(tests/hub_server.py) serve a 4 MiB real GGUF. No network."""

import errno
import shutil
import threading
from collections import namedtuple

import pytest

from engine.models import downloads
from engine.models.downloads import DownloadCancelled, DownloadError, download, part_path
from engine.models.hubs import entry_for
from tests.hub_server import HubServer, ModelScopeServer, write_tiny_gguf

REPO = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
FILE = "qwen2.5-0.5b-instruct-q4_k_m.gguf"
NAMES = {"huggingface": "Hugging Face", "modelscope": "ModelScope"}


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")  # 4 MiB of weights


@pytest.fixture
def serve(gguf, tmp_path, monkeypatch):
    """serve(hub_id, **misbehaviour) -> (server, entry); the server is stopped after the test."""
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    started = []

    def start(hub_id, **kw):
        server = (ModelScopeServer if hub_id == "modelscope" else HubServer)({f"{REPO}/{FILE}": gguf}, **kw)
        started.append(server)
        monkeypatch.setenv("ASSISTANT_HUB_" + hub_id.upper(), server.url)
        return server, entry_for(REPO, FILE, hub_id)

    yield start
    for s in started:
        s.stop()


both = pytest.mark.parametrize("hub_id", ["huggingface", "modelscope"])


@both
def test_a_dropped_connection_keeps_the_part_and_the_next_try_resumes(serve, gguf, hub_id):
    server, entry = serve(hub_id, drop_after=3_000_000)
    with pytest.raises(DownloadError, match=rf"the connection to {NAMES[hub_id]} was lost after \d+ MB; "
                                            "the partial file is kept, try again to resume"):
        download(entry, hub=hub_id)
    kept = part_path(entry.download_path()).stat().st_size
    assert 0 < kept < gguf.stat().st_size and not entry.download_path().exists()
    path = download(entry, hub=hub_id)
    assert server.ranges == [f"bytes={kept}-"]  # only the rest was asked for
    assert path.read_bytes() == gguf.read_bytes() and not part_path(path).exists()


def test_a_stalled_connection_times_out_with_the_same_advice(serve):
    _, entry = serve("huggingface", throttle_bytes_per_s=20_000)  # 3 s per 64 KiB block
    with pytest.raises(DownloadError, match="the connection to Hugging Face was lost after .* try again to resume"):
        download(entry, timeout=0.5)


@both
def test_cancel_keeps_the_part(serve, hub_id):
    _, entry = serve(hub_id, throttle_bytes_per_s=40e6)
    cancel = threading.Event()
    with pytest.raises(DownloadCancelled, match="kept to resume"):
        download(entry, progress=lambda done, total: cancel.set() if done >= 1 << 20 else None, cancel=cancel,
                 hub=hub_id)
    assert part_path(entry.download_path()).stat().st_size == 1 << 20  # the first MiB block
    assert not entry.download_path().exists()


def test_not_enough_disk_space_is_said_before_anything_is_written(serve, gguf, monkeypatch, tmp_path):
    _, entry = serve("modelscope")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 ** 9, 10 ** 9 - 50_000_000, 50_000_000))
    with pytest.raises(DownloadError, match=rf"not enough free disk space: needs 71 MB, 50 MB free in "
                                            rf"{tmp_path / 'models'}"):
        download(entry, hub="modelscope")
    assert not (tmp_path / "models").exists()


def test_a_disk_that_fills_up_keeps_the_part(serve, monkeypatch):
    _, entry = serve("huggingface")
    real_open = open

    class Filling:
        def __init__(self, f):
            self.f, self.written = f, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def close(self):
            self.f.close()

        def write(self, data):
            if self.written >= 2 << 20:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += self.f.write(data)

    monkeypatch.setattr(downloads, "open", lambda p, mode="r": Filling(real_open(p, mode)) if "w" in mode or
                        "a" in mode else real_open(p, mode), raising=False)
    with pytest.raises(DownloadError, match=r"the disk is full after 2 MB of .*; the partial file is kept .* "
                                            "free some space and try again to resume"):
        download(entry)
    assert part_path(entry.download_path()).stat().st_size == 2 << 20
    monkeypatch.undo()


def test_a_server_that_ignores_range_restarts_cleanly(serve, gguf):
    server, entry = serve("huggingface", drop_after=3_000_000)
    with pytest.raises(DownloadError, match="lost"):
        download(entry)
    assert part_path(entry.download_path()).exists()
    server.ignore_range = True
    path = download(entry)
    assert len(server.ranges) == 1 and path.read_bytes() == gguf.read_bytes()  # asked for the rest, got it all


@both
def test_an_html_page_instead_of_the_file_is_refused(serve, hub_id):
    _, entry = serve(hub_id, html=True)
    with pytest.raises(DownloadError, match=f"{NAMES[hub_id]} sent a web page instead of the model file: a Wi-Fi "
                                            "login page or a proxy may be in the way"):
        download(entry, hub=hub_id)
    assert not part_path(entry.download_path()).exists() and not entry.download_path().exists()


def test_an_html_page_is_refused_even_without_a_checksum(serve, monkeypatch):
    # A catalog entry without sha256, on a mirror that gives no ETag digest: only the GGUF check is left.
    server, entry = serve("huggingface", html=True)
    server.digests[f"{REPO}/{FILE}"] = "not-a-digest"
    with pytest.raises(DownloadError, match="sent a web page instead of the model file"):
        download(entry)


@both
def test_gated_and_missing_files_in_plain_words(serve, hub_id):
    server, entry = serve(hub_id, status={f"{REPO}/{FILE}": 403})
    if hub_id == "modelscope":  # the listing is fine, the bytes are refused
        with pytest.raises(DownloadError, match=rf"{REPO} on ModelScope is gated or private \(HTTP 403\): accept its"):
            download(entry, hub=hub_id)
    else:  # huggingface_hub's metadata request is refused first
        with pytest.raises(DownloadError, match=rf"cannot reach {REPO}/{FILE} on Hugging Face: {REPO} on Hugging Face "
                                                r"is gated or private \(HTTP 403\)"):
            download(entry, hub=hub_id)
    missing = entry_for(REPO, "other-q8_0.gguf", hub_id)
    with pytest.raises(DownloadError, match=rf"has no file other-q8_0.gguf in {REPO} \(HTTP 404\)"):
        download(missing, hub=hub_id)


def test_an_unreachable_hub_says_so(serve, monkeypatch):
    _, entry = serve("modelscope")
    monkeypatch.setenv("ASSISTANT_HUB_MODELSCOPE", "http://127.0.0.1:9")
    with pytest.raises(DownloadError, match="cannot reach .*ModelScope at http://127.0.0.1:9"):
        download(entry, hub="modelscope", timeout=2)


@both
def test_a_body_longer_than_announced_is_cut_off_and_deleted(serve, hub_id):
    # A broken or hostile server streaming on past the file's size must not fill the disk.
    server, entry = serve(hub_id, oversize=8 << 20)
    with pytest.raises(DownloadError, match="sent more than the .* it announced; the download was deleted"):
        download(entry, hub=hub_id)
    assert not part_path(entry.download_path()).exists() and not entry.download_path().exists()
