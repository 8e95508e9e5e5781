"""A vision model and its projector come down as a pair (issue 41): from a fake Hugging Face and
a fake ModelScope on loopback, the catalog's SmolVLM2 256M entry serves the synthetic vision pair
(tests/vision_model.py) under the real file names; the projector lands beside the model under the
hub's name, the model then resolves with it, and the planner counts the file. A projector the hub
damaged in transit fails its sha256 and is deleted, naming the file."""

from __future__ import annotations

import pytest

from engine.api import DownloadError, download, load_catalog, part_path, plan
from engine.models.catalog import find_projector, resolve_model
from engine.models.hubs import HubFile, HubRepo, entry_for
from tests import vision_model as vm
from tests.hub_server import HubServer, ModelScopeServer

ID = "smolvlm2-256m-video-instruct"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """hub(hub_id, **misbehaviour) -> (server, entry)."""
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    entry = load_catalog().get(ID)
    model, mmproj = vm.vision_pair()
    repo = entry.sources["huggingface"]
    started = []

    def start(hub_id, **kw):
        files = {f"{repo}/{entry.file}": model, f"{repo}/{entry.projector}": mmproj}
        server = (ModelScopeServer if hub_id == "modelscope" else HubServer)(files, **kw)
        started.append(server)
        monkeypatch.setenv("ASSISTANT_HUB_" + hub_id.upper(), server.url)
        return server, entry

    yield start
    for s in started:
        s.stop()


@pytest.mark.parametrize("hub_id", ["huggingface", "modelscope"])
def test_the_model_and_its_projector_download_as_a_pair(hub, hub_id):
    _, entry = hub(hub_id)
    with pytest.raises(Exception):
        resolve_model(ID)  # not downloaded yet
    download(entry, hub=hub_id)
    projector = download(entry.projector_entry(), hub=hub_id)
    assert projector.name == entry.projector and projector.parent == entry.download_path().parent
    resolved = resolve_model(ID)
    assert resolved.projector == projector
    p = plan(ID, 0, 2048)
    assert p.projector_bytes == projector.stat().st_size and p.image_tokens == entry.image_tokens


def test_a_projector_damaged_in_transit_is_deleted(hub):
    _, entry = hub("huggingface", corrupt=True)
    with pytest.raises(DownloadError, match=entry.projector + " failed its sha256 check"):
        download(entry.projector_entry(), hub="huggingface")
    target = entry.projector_entry().download_path()
    assert not target.exists() and not part_path(target).exists()


def test_a_hub_search_result_of_a_vision_repository_comes_with_its_projector():
    repo = HubRepo("huggingface", "ggml-org/SmolVLM2-256M-Video-Instruct-GGUF",
                   files=[HubFile("SmolVLM2-256M-Video-Instruct-Q8_0.gguf", "Q8_0", 175),
                          HubFile("SmolVLM2-256M-Video-Instruct-f16.gguf", "F16", 330)],
                   projectors=[HubFile("mmproj-SmolVLM2-256M-Video-Instruct-f16.gguf", "F16", 190),
                               HubFile("mmproj-SmolVLM2-256M-Video-Instruct-Q8_0.gguf", "Q8_0", 104)])
    q8 = entry_for(repo, repo.files[0], "huggingface")
    assert (q8.projector, q8.projector_bytes) == ("mmproj-SmolVLM2-256M-Video-Instruct-Q8_0.gguf", 104)
    assert entry_for(repo, repo.files[1], "huggingface").projector.endswith("-f16.gguf")
    assert entry_for(HubRepo("huggingface", "a/b", files=repo.files), repo.files[0], "huggingface").projector == ""


def test_a_projector_named_for_its_repository_is_found_beside_the_model(tmp_path):
    model = tmp_path / "google_gemma-3-4b-it-Q4_K_M.gguf"
    model.write_bytes(b"GGUF")
    assert find_projector(model) is None
    (tmp_path / "mmproj-google_gemma-3-4b-it-f16.gguf").write_bytes(b"GGUF")
    assert find_projector(model).name == "mmproj-google_gemma-3-4b-it-f16.gguf"
    (tmp_path / "mmproj-google_gemma-3-4b-it-bf16.gguf").write_bytes(b"GGUF")
    assert find_projector(model) is None  # two: which one is not for us to guess
    (tmp_path / f"mmproj-{model.stem}.gguf").write_bytes(b"GGUF")
    assert find_projector(model).name == f"mmproj-{model.stem}.gguf"  # the converter's own name wins
