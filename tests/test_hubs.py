"""Hub search and downloads from each hub, against fake Hugging Face and ModelScope servers on
127.0.0.1 serving small real GGUFs (tests/hub_server.py). No network."""

import argparse
import dataclasses
import hashlib
import json

import pytest

from engine.cli.hub import register
from engine.models.fit import size_fit
from engine.models.downloads import DownloadError, download, part_path
from engine.models.hubs import (HubError, HubFile, default_hub, entry_for, get_hub, hubs, looks_instruct, quant_of,
                                repo_files, search)
from tests.hub_server import HubServer, ModelScopeServer, write_tiny_gguf

QWEN = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
BASE = "someone/TinyBase-GGUF"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ggufs")
    return {"small": write_tiny_gguf(d / "small.gguf", 1 << 18, seed=1),  # 1 MiB of weights
            "big": write_tiny_gguf(d / "big.gguf", 1 << 19, seed=2)}


def layout(g):
    """The repositories both fake hubs serve: two quants, a split quant, a projector, a README."""
    return {f"{QWEN}/qwen2.5-0.5b-instruct-q4_k_m.gguf": g["small"],
            f"{QWEN}/qwen2.5-0.5b-instruct-q8_0.gguf": g["big"],
            f"{QWEN}/qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf": g["big"],
            f"{QWEN}/qwen2.5-0.5b-instruct-fp16-00002-of-00002.gguf": g["small"],
            f"{QWEN}/mmproj-f16.gguf": g["small"],
            f"{BASE}/TinyBase.IQ4_XS.gguf": g["small"],
            "nobody/qwen-notes/README.md": g["small"]}


META = {QWEN: {"downloads": 9000, "likes": 42}, BASE: {"downloads": 10, "likes": 1}}


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    return monkeypatch


def test_hubs_are_data_with_overridable_endpoints(monkeypatch):
    for name in ("ASSISTANT_HUB_HUGGINGFACE", "ASSISTANT_HUB_MODELSCOPE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert [(h.id, h.endpoint, h.kind) for h in hubs()] == [
        ("huggingface", "https://huggingface.co", "hf"), ("hf-mirror", "https://hf-mirror.com", "hf"),
        ("modelscope", "https://www.modelscope.cn", "modelscope")]
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1/")
    monkeypatch.setenv("ASSISTANT_HUB_HF_MIRROR", "http://127.0.0.1:2")
    monkeypatch.setenv("ASSISTANT_HUB_MODELSCOPE", "http://127.0.0.1:3")
    assert [h.endpoint for h in hubs()] == ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]
    monkeypatch.setenv("ASSISTANT_HUB_HUGGINGFACE", "http://127.0.0.1:4")  # ours beats HF_ENDPOINT
    assert get_hub("huggingface").endpoint == "http://127.0.0.1:4"
    assert (default_hub("zh_CN"), default_hub("zh"), default_hub("en_US"), default_hub("de")) == \
        ("modelscope", "modelscope", "huggingface", "huggingface")
    with pytest.raises(HubError, match="unknown hub 'civitai'"):
        get_hub("civitai")


def test_quants_and_instruct_read_from_names():
    names = {"qwen2.5-7b-instruct-q4_k_m.gguf": "Q4_K_M", "Llama-3-8B.IQ4_XS.gguf": "IQ4_XS", "m-f16.gguf": "F16",
             "m.fp16.gguf": "F16", "gemma-3-1b-it-BF16.gguf": "BF16", "x-UD-Q4_K_XL-00001-of-00003.gguf": "Q4_K_XL",
             "Q8_0/m-Q8_0.gguf": "Q8_0",
             "gpt-oss-20b-MXFP4.gguf": "MXFP4", "plain.gguf": ""}
    assert {n: quant_of(n) for n in names} == names
    names = ("Qwen2.5-7B-Instruct", "gemma-3-1b-it", "Baichuan2-7B-Chat", "Llama-3-8B", "Tiny-Italian")
    assert [looks_instruct(n) for n in names] == [True, True, True, False, False]


def test_search_on_hugging_face(ggufs, env):
    hub = HubServer(layout(ggufs), meta=META)
    env.setenv("HF_ENDPOINT", hub.url)
    try:
        repos = search("qwen", "huggingface", limit=5)
        also = search("tiny", "huggingface")
    finally:
        hub.stop()
    assert [r.repo for r in also] == [BASE] and also[0].files[0].quant == "IQ4_XS"
    # "qwen" matches QWEN and the README-only repo; only QWEN has GGUFs
    assert [r.repo for r in repos] == [QWEN]
    _check_files(repos[0], ggufs)
    listing = [p for m, p in hub.requests if p.startswith("/api/models?")]
    assert "filter=gguf" in listing[0] and "search=qwen" in listing[0] and "limit=5" in listing[0]
    assert any(p.startswith(f"/api/models/{QWEN}") and "blobs=true" in p.lower() for _, p in hub.requests)


def _check_files(repo, g):
    small, big = g["small"].stat().st_size, g["big"].stat().st_size
    assert (repo.downloads, repo.likes) == (9000, 42) and repo.updated.startswith("2025-01-02")
    assert [(f.name, f.quant, f.size_bytes, f.parts) for f in repo.files] == [
        ("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M", small, 1),
        ("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0", big, 1),
        ("qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf", "F16", small + big, 2)]  # mmproj left out
    assert repo.files[0].sha256 == hashlib.sha256(g["small"].read_bytes()).hexdigest()
    assert repo.files[2].split and repo.files[2].sha256 == ""


@pytest.mark.parametrize("dolphin", [True, False], ids=["web-search-route", "openapi-fallback"])
def test_search_on_modelscope(ggufs, env, dolphin):
    hub = ModelScopeServer(layout(ggufs), meta=META, dolphin=dolphin)
    env.setenv("ASSISTANT_HUB_MODELSCOPE", hub.url)
    try:
        repos = search("qwen", "modelscope", limit=5)
    finally:
        hub.stop()
    assert [r.repo for r in repos] == [QWEN]
    _check_files(repos[0], ggufs)
    assert any(p.startswith(f"/api/v1/models/{QWEN}/repo/files?") and "Recursive=True" in p for _, p in hub.requests)
    assert (("PUT", "/api/v1/dolphin/models") in hub.requests) and \
        (dolphin or any(p.startswith("/openapi/v1/models?") for _, p in hub.requests))


def test_search_errors_are_plain_words(ggufs, env):
    env.setenv("ASSISTANT_HUB_MODELSCOPE", "http://127.0.0.1:9")
    with pytest.raises(HubError, match=r"search on ModelScope failed: cannot reach ModelScope at http://127.0.0.1:9"):
        search("qwen", "modelscope", timeout=2)
    hub = HubServer(layout(ggufs))
    env.setenv("HF_ENDPOINT", hub.url)
    try:
        with pytest.raises(HubError, match=r"cannot list nobody/nothing: not found on Hugging Face \(HTTP 404\)"):
            repo_files("huggingface", "nobody/nothing")
    finally:
        hub.stop()


def test_entry_for_a_found_file(ggufs):
    f = HubFile("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M", 1234, "ab" * 32)
    e = entry_for(QWEN, f, "modelscope")
    assert (e.id, e.file, e.quant, e.size_bytes, e.sha256, e.source_repo) == (
        f"hub:{QWEN}/{f.name}", f.name, "Q4_K_M", 1234, "ab" * 32, QWEN)
    assert e.url.endswith(f"/api/v1/models/{QWEN}/repo?Revision=master&FilePath={f.name}")
    assert e.instruct is True and e.sources == {"modelscope": QWEN} and e.files == {"Q4_K_M": f.name}
    assert entry_for(BASE, "TinyBase.IQ4_XS.gguf", "huggingface").instruct is False
    with pytest.raises(HubError, match="split into 2 files"):
        entry_for(QWEN, HubFile("a-00001-of-00002.gguf", "F16", 9, "", 2), "huggingface")


@pytest.mark.parametrize("hub_id", ["huggingface", "hf-mirror", "modelscope"])
def test_download_a_found_file_from_each_hub_checks_its_sha256(ggufs, env, hub_id):
    server = (ModelScopeServer if hub_id == "modelscope" else HubServer)(layout(ggufs), meta=META)
    env.setenv("ASSISTANT_HUB_" + hub_id.upper().replace("-", "_"), server.url)
    try:
        found = search("qwen", hub_id)[0]
        f = next(f for f in found.files if f.quant == "Q8_0")
        path = download(entry_for(found, f, hub_id), hub=hub_id)
        corrupt = server.corrupt = True
        with pytest.raises(DownloadError, match=r"failed its sha256 check .* the download was deleted"):
            download(entry_for(found, next(f for f in found.files if f.quant == "Q4_K_M"), hub_id), hub=hub_id)
    finally:
        server.stop()
    assert corrupt and path.read_bytes() == ggufs["big"].read_bytes() and path.name == f.name
    q4 = path.parent / "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    assert not q4.exists() and not part_path(q4).exists()


def test_fit_by_size_words():
    gib = 1 << 30
    assert [size_fit(s, 6 * gib, 16 * gib) for s in (0, gib, 8 * gib, 18 * gib, 30 * gib)] == \
        ["unknown", "gpu", "cpu", "partial", "too_big"]
    assert size_fit(8 * gib, 0, 4 * gib) == "too_big"


def test_cli_search_and_download(ggufs, env, capsys):
    hub = HubServer(layout(ggufs), meta=META)
    env.setenv("ASSISTANT_HUB_HF_MIRROR", hub.url)
    parser = argparse.ArgumentParser(prog="assistant models")
    register(parser.add_subparsers(dest="models_command"))
    try:
        args = parser.parse_args(["search", "qwen", "--hub", "hf-mirror", "--json", "--limit", "3"])
        assert args.func(args) == 0
        rows = json.loads(capsys.readouterr().out)
        args = parser.parse_args(["search", "qwen", "--hub", "hf-mirror"])
        assert args.func(args) == 0
        text = capsys.readouterr().out
        args = parser.parse_args(["download", QWEN, "qwen2.5-0.5b-instruct-q4_k_m.gguf", "--hub", "hf-mirror"])
        assert args.func(args) == 0
        path = capsys.readouterr().out.strip()
        args = parser.parse_args(["download", QWEN, "nothing-q4_0.gguf", "--hub", "hf-mirror"])
        assert args.func(args) == 1
        err = capsys.readouterr().err
    finally:
        hub.stop()
    assert [r["repo"] for r in rows] == [QWEN]
    assert [(f["quant"], f["parts"]) for f in rows[0]["files"]] == [("Q4_K_M", 1), ("Q8_0", 1), ("F16", 2)]
    assert rows[0]["files"][2]["fits"] == "split" and rows[0]["files"][0]["fits"] in ("gpu", "cpu")
    assert "Q4_K_M" in text and "split in 2 files: cannot be loaded" in text
    assert open(path, "rb").read() == ggufs["small"].read_bytes()
    assert "has no file nothing-q4_0.gguf" in err


@pytest.mark.parametrize("name", ["../../.bashrc.gguf", "/etc/evil.gguf", "a/../../b.gguf", "C:\\x.gguf",
                                  "dir\\..\\x.gguf", "ok/./x.gguf", "x\n.gguf", ""])
def test_a_hostile_file_name_never_leaves_the_models_folder(name, tmp_path, monkeypatch):
    from engine.models.downloads import DownloadError, download
    from engine.models.hubs import HubError, entry_for, safe_repo_path

    assert not safe_repo_path(name)
    with pytest.raises(HubError, match="not a plain file name"):
        entry_for("owner/repo", name, "huggingface")
    # A catalog-like entry carrying such a name is refused before any connection is made.
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    entry = entry_for("owner/repo", "fine.gguf", "huggingface")
    with pytest.raises(DownloadError, match="not a file name inside the models folder"):
        download(dataclasses.replace(entry, file=name, files={}), hub="huggingface", timeout=0.1)
    assert not any(tmp_path.rglob("*.gguf"))


def test_plain_names_and_folders_inside_a_repo_are_fine():
    from engine.models.hubs import entry_for, safe_repo_path

    for name in ("qwen2.5-7b-instruct-q4_k_m.gguf", "Q4_K_M/model-Q4_K_M.gguf"):
        assert safe_repo_path(name) and entry_for("owner/repo", name, "huggingface").file == name
