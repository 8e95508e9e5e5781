"""Catalog downloads through huggingface_hub's URL and metadata, against a local hub on 127.0.0.1
(HF_ENDPOINT) serving a real GGUF: progress, cancel, resume, sha256, clear errors. No network."""

import threading
from dataclasses import replace

import pytest

from engine.models.catalog import load_catalog
from engine.models.downloads import DownloadCancelled, DownloadError, download, part_path
from tests.hub_server import HubServer

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture
def entry(model_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    base = load_catalog().get("demo-small")
    return replace(base, id="smol-download", source_repo=REPO, file=model_paths["demo-small"].name, sha256="")


def serve(model_paths, **kw):
    return HubServer({f"{REPO}/{model_paths['demo-small'].name}": model_paths["demo-small"]}, **kw)


def test_download_with_progress_and_the_hubs_sha256(entry, model_paths, monkeypatch):
    hub = serve(model_paths)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    seen = []
    try:
        path = download(entry, progress=lambda done, total: seen.append((done, total)))
    finally:
        hub.stop()
    assert path == entry.path() and path.read_bytes() == model_paths["demo-small"].read_bytes()
    assert seen[-1] == (path.stat().st_size, path.stat().st_size) and not part_path(path).exists()


def test_cancel_keeps_the_part_and_a_retry_resumes(entry, model_paths, monkeypatch):
    hub = serve(model_paths, throttle_bytes_per_s=40e6)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    cancel = threading.Event()
    try:
        with pytest.raises(DownloadCancelled, match="kept to resume"):
            download(entry, progress=lambda done, total: cancel.set() if done > 5e6 else None, cancel=cancel)
        kept = part_path(entry.path()).stat().st_size
        assert 5e6 < kept < model_paths["demo-small"].stat().st_size and not entry.path().exists()
        hub.throttle = None
        path = download(entry)
    finally:
        hub.stop()
    assert hub.ranges == [f"bytes={kept}-"]  # only the rest was fetched
    assert path.read_bytes() == model_paths["demo-small"].read_bytes()


def test_corrupt_bytes_fail_the_sha256_and_a_missing_file_says_so(entry, model_paths, monkeypatch):
    hub = serve(model_paths, corrupt=True)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    try:
        with pytest.raises(DownloadError, match="sha256"):
            download(entry)
        assert not entry.path().exists() and not part_path(entry.path()).exists()
        with pytest.raises(DownloadError, match="cannot reach"):
            download(replace(entry, file="missing.gguf", files={}))
    finally:
        hub.stop()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(DownloadError, match="cannot reach"):
        download(entry)
