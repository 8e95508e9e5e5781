"""Model hubs as data, GGUF search on them, and turning a found file into a downloadable ModelEntry.

Hubs: Hugging Face, hf-mirror.com (the same API, reachable from mainland China) and ModelScope
(Alibaba's hub, the usual source in China). Every endpoint can be pointed elsewhere with
`ASSISTANT_HUB_<ID>` (`ASSISTANT_HUB_MODELSCOPE=http://127.0.0.1:8000`, `ASSISTANT_HUB_HF_MIRROR=…`):
tests use fake hubs on loopback, companies their own mirror. `HF_ENDPOINT` still moves "huggingface".

ModelScope speaks plain httpx here rather than through the `modelscope` package: that package pulls
heavy dependencies (requests, its own hub client, datasets, …) for the three routes we need. The routes,
read from modelscope 1.40 / modelscope-hub 0.5 sources and from public clients of the site:
  search  PUT  /api/v1/dolphin/models  {"Name", "PageSize", "PageNumber", "SortBy", "Criterion": [...]}
          -> Data.Model.Models[{Path (owner), Name, Downloads, Stars, LastUpdatedTime}] (what the web site
          uses; it filters on the "gguf" library); when a server lacks it (404/405) we fall back to the
          official SDK's GET /openapi/v1/models?search=&page_size= -> data.models[{id, downloads, likes,
          last_modified}].
  files   GET  /api/v1/models/{owner}/{name}/repo/files?Revision=master&Recursive=True
          -> Data.Files[{Name, Path, Size, Sha256, Type}]
  bytes   GET  /api/v1/models/{owner}/{name}/repo?Revision=master&FilePath=…  (redirects to a CDN; Range works)
"""

from __future__ import annotations

import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from urllib.parse import quote

import httpx
from huggingface_hub import HfApi
from huggingface_hub.utils import get_session, hf_raise_for_status

from engine.models.catalog import ModelEntry
from engine.models.instruct import name_says_instruct

log = logging.getLogger(__name__)

SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# Quant labels as llama.cpp's quantize names them; the last one in a file name wins.
_QUANT = re.compile(r"(?<![a-z0-9])(i?q[1-8](?:_[a-z0-9]+)*|bf16|fp?16|fp?32|tq[12]_0|mxfp4)(?![a-z0-9])",
                    re.IGNORECASE)


class HubError(RuntimeError):
    """A hub could not be searched or listed; the message says why and what to try."""


@dataclass(frozen=True)
class Hub:
    id: str
    name: str  # for messages: "Hugging Face"
    endpoint: str  # base URL, no trailing slash
    kind: str  # "hf" (Hugging Face API) or "modelscope"


_HUBS = (Hub("huggingface", "Hugging Face", "https://huggingface.co", "hf"),
         Hub("hf-mirror", "hf-mirror.com", "https://hf-mirror.com", "hf"),
         Hub("modelscope", "ModelScope", "https://www.modelscope.cn", "modelscope"))


def _env_name(hub_id: str) -> str:
    return "ASSISTANT_HUB_" + hub_id.upper().replace("-", "_")


def _with_env(hub: Hub) -> Hub:
    url = os.environ.get(_env_name(hub.id)) or (os.environ.get("HF_ENDPOINT") if hub.id == "huggingface" else "")
    return Hub(hub.id, hub.name, (url or hub.endpoint).rstrip("/"), hub.kind)


def hubs() -> list[Hub]:
    """The known hubs, endpoints as overridden by the environment (read on every call)."""
    return [_with_env(h) for h in _HUBS]


def get_hub(hub_id: str) -> Hub:
    """Raises: HubError for an unknown id."""
    for h in hubs():
        if h.id == hub_id:
            return h
    raise HubError(f"unknown hub '{hub_id}' (known: {', '.join(h.id for h in _HUBS)})")


def default_hub(locale: str) -> str:
    """"modelscope" for a Chinese locale (zh_CN, zh-TW, zh): huggingface.co is blocked in mainland
    China and ModelScope carries the popular GGUFs there; "huggingface" everywhere else."""
    return "modelscope" if locale.lower().replace("-", "_").startswith("zh") else "huggingface"


@dataclass(frozen=True)
class HubFile:
    name: str  # path in the repo; for a split model, its first part
    quant: str  # "Q4_K_M", "IQ4_XS", "F16"…; "" when the name does not say
    size_bytes: int  # all parts of a split model together; 0 = unknown
    sha256: str = ""  # "" for split models and when the hub does not say
    parts: int = 1  # >1: split GGUF (-00001-of-0000N); we load single files only

    @property
    def split(self) -> bool:
        return self.parts > 1


@dataclass(frozen=True)
class HubRepo:
    hub: str
    repo: str  # "owner/name"
    downloads: int = 0
    likes: int = 0
    updated: str = ""  # ISO 8601 date-time as the hub gave it, "" if unknown
    files: list[HubFile] = field(default_factory=list)
    projectors: list[HubFile] = field(default_factory=list)  # its vision projectors (mmproj-*), if any


def quant_of(file_name: str) -> str:
    """The quant label in a GGUF file name ("qwen2.5-7b-instruct-q4_k_m.gguf" -> "Q4_K_M"), or ""."""
    stem = SPLIT.sub(".gguf", file_name.rsplit("/", 1)[-1])[: -len(".gguf")]
    found = _QUANT.findall(stem)
    quant = found[-1].upper() if found else ""
    return "F" + quant[2:] if quant.startswith("FP") else quant  # "fp16" is llama.cpp's F16


def gguf_files(raw: list[tuple[str, int, str]], projectors: bool = False) -> list[HubFile]:
    """Model GGUFs of a listing of (path, size, sha256): split parts grouped into one entry,
    projector files (mmproj-*, not a chat model) left out unless `projectors`; sorted by size."""
    singles, groups = [], {}
    for path, size, sha in raw:
        base = path.rsplit("/", 1)[-1].lower()
        if not base.endswith(".gguf") or (base.startswith("mmproj") and not projectors):
            continue
        m = SPLIT.search(path)
        if not m:
            singles.append(HubFile(path, quant_of(path), size or 0, sha or ""))
            continue
        key = path[: m.start()]
        first, total, count = groups.get(key, (None, 0, int(m.group(2))))
        if m.group(1) == "00001":
            first = path
        groups[key] = (first, total + (size or 0), count)
    for key, (first, total, count) in groups.items():
        name = first or f"{key}-00001-of-{count:05d}.gguf"
        singles.append(HubFile(name, quant_of(name), total, "", count))
    return sorted(singles, key=lambda f: (f.size_bytes, f.name))


# ---- Hugging Face API (huggingface.co and mirrors speaking its API)

def _hf_files(hub: Hub, repo: str, timeout: float, projectors: bool = False) -> list[HubFile]:
    info = HfApi(endpoint=hub.endpoint).model_info(repo, files_metadata=True, timeout=timeout)
    return gguf_files([(s.rfilename, s.size or 0, s.lfs.sha256 if s.lfs else "") for s in info.siblings or []],
                      projectors)


def _hf_search(hub: Hub, query: str, limit: int, timeout: float) -> list[HubRepo]:
    # The request HfApi.list_models(search=, filter="gguf", sort="downloads", limit=, expand=[...]) sends,
    # made here directly because list_models takes no timeout and a dead hub would hang the search.
    params = [("search", query), ("filter", "gguf"), ("sort", "downloads"), ("limit", str(limit)),
              ("expand", "downloads"), ("expand", "likes"), ("expand", "lastModified")]
    r = get_session().get(f"{hub.endpoint}/api/models", params=params, timeout=timeout)
    hf_raise_for_status(r)
    return [HubRepo(hub.id, m["id"], int(m.get("downloads") or 0), int(m.get("likes") or 0),
                    str(m.get("lastModified") or "")) for m in r.json()[:limit]]


# ---- ModelScope

def _ms_json(r: httpx.Response) -> dict:
    r.raise_for_status()
    data = r.json()
    if not isinstance(data, dict):
        raise ValueError("unexpected answer")
    return data.get("Data") or data.get("data") or {}


def _ms_files(hub: Hub, repo: str, timeout: float, projectors: bool = False) -> list[HubFile]:
    r = httpx.get(f"{hub.endpoint}/api/v1/models/{repo}/repo/files", params={"Revision": "master", "Recursive": "True"},
                  timeout=timeout, follow_redirects=True)
    files = _ms_json(r).get("Files") or []
    return gguf_files([(f.get("Path") or f.get("Name", ""), int(f.get("Size") or 0), f.get("Sha256") or "")
                       for f in files if f.get("Type", "blob") != "tree"], projectors)


def _when(value) -> str:
    if isinstance(value, (int, float)) and value > 0:  # ModelScope gives epoch seconds
        return datetime.fromtimestamp(value, timezone.utc).isoformat()
    return str(value or "")


def _ms_search(hub: Hub, query: str, limit: int, timeout: float) -> list[HubRepo]:
    body = {"Name": query, "PageNumber": 1, "PageSize": limit, "SortBy": "Default", "Target": "", "SingleCriterion": [],
            "Criterion": [{"category": "libraries", "predicate": "contains", "values": ["gguf"]}]}
    r = httpx.put(f"{hub.endpoint}/api/v1/dolphin/models", json=body, timeout=timeout, follow_redirects=True)
    if r.status_code not in (404, 405):
        models = (_ms_json(r).get("Model") or {}).get("Models") or []
        return [HubRepo(hub.id, f"{m['Path']}/{m['Name']}", int(m.get("Downloads") or 0), int(m.get("Stars") or 0),
                        _when(m.get("LastUpdatedTime") or m.get("GmtModified"))) for m in models[:limit]]
    r = httpx.get(f"{hub.endpoint}/openapi/v1/models", params={"search": query, "page_number": 1, "page_size": limit},
                  timeout=timeout, follow_redirects=True)
    models = _ms_json(r).get("models") or []
    return [HubRepo(hub.id, m["id"], int(m.get("downloads") or 0), int(m.get("likes") or 0),
                    _when(m.get("last_modified"))) for m in models[:limit]]


# ---- the public calls

def _why(exc: Exception, hub: Hub) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return f"{hub.name} refused the request (HTTP {status}): the repository is gated or private"
    if status == 404:
        return f"not found on {hub.name} (HTTP 404)"
    if status:
        return f"{hub.name} answered HTTP {status}; try again later or another hub"
    return f"cannot reach {hub.name} at {hub.endpoint}; check the connection or choose another hub"


def repo_files(hub_id: str, repo: str, timeout: float = 10, projectors: bool = False) -> list[HubFile]:
    """The model GGUFs of one repository, with size, quant and sha256 (when the hub gives it);
    with `projectors`, its vision projectors (mmproj-*) too.

    Raises:
        HubError: unknown hub, unreachable, repository not found or gated.
    """
    hub = get_hub(hub_id)
    try:
        return (_hf_files if hub.kind == "hf" else _ms_files)(hub, repo, timeout, projectors)
    except Exception as exc:  # noqa: BLE001 - httpx, huggingface_hub and JSON errors all mean "no listing"
        log.info("listing %s on %s failed: %r", repo, hub.id, exc)
        raise HubError(f"cannot list {repo}: {_why(exc, hub)}") from exc


def search(query: str, hub_id: str, limit: int = 20, timeout: float = 10) -> list[HubRepo]:
    """GGUF repositories matching `query` on a hub, most downloaded first, each with its GGUF files.

    Repositories whose listing fails or holds no GGUF are left out (a search result must be downloadable).

    Raises:
        HubError: unknown hub, or the hub cannot be searched; the message says what to try.
    """
    hub = get_hub(hub_id)
    try:
        found = (_hf_search if hub.kind == "hf" else _ms_search)(hub, query, limit, timeout)
    except Exception as exc:  # noqa: BLE001 - see repo_files
        log.info("search %r on %s failed: %r", query, hub.id, exc)
        raise HubError(f"search on {hub.name} failed: {_why(exc, hub)}") from exc

    def with_files(r: HubRepo) -> HubRepo | None:
        try:
            listed = repo_files(hub.id, r.repo, timeout, projectors=True)
        except HubError as exc:
            log.info("%s", exc)
            return None
        files = [f for f in listed if not _is_projector(f.name)]
        projectors = [f for f in listed if _is_projector(f.name)]
        return HubRepo(r.hub, r.repo, r.downloads, r.likes, r.updated, files, projectors) if files else None

    with ThreadPoolExecutor(max_workers=8) as pool:  # one listing per repository: do them side by side
        listed = [r for r in pool.map(with_files, found) if r is not None]
    return sorted(listed, key=lambda r: -r.downloads)


def file_url(hub_id: str, repo: str, file: str) -> str:
    """Where a hub serves a file's bytes (HF kinds: the resolve URL; ModelScope: its repo route)."""
    hub = get_hub(hub_id)
    if hub.kind == "hf":
        return f"{hub.endpoint}/{repo}/resolve/main/{quote(file)}"
    return f"{hub.endpoint}/api/v1/models/{repo}/repo?Revision=master&FilePath={quote(file, safe='')}"


def looks_instruct(name: str) -> bool:
    """Instruction-tuned, judged from a repo or file name ("-Instruct", "-it", "chat"…). Until the
    GGUF header is read this is all we know; a base model mistaken for a chat model answers badly."""
    return name_says_instruct(name)


def safe_repo_path(name: str) -> bool:
    """A relative path of plain parts: no "..", no root, no drive, no backslash, no control chars."""
    parts = name.split("/")
    return (bool(name) and "\\" not in name and ":" not in name and not name.startswith("/")
            and all(p not in ("", ".", "..") for p in parts) and not any(ord(c) < 32 for c in name))


def entry_for(repo: str | HubRepo, file: HubFile | str, hub_id: str) -> ModelEntry:
    """An ad-hoc catalog entry for a hub file, for `engine.models.downloads.download(entry, hub=hub_id)`.

    Its id is "hub:<repo>/<file>" (stable across hubs, so the same file is one model). Size, quant and
    sha256 come from the listing; the planner's facts (layers, heads, context) are unknown until the
    file is downloaded, then `planner.plan(path)` reads them from its GGUF header.

    Raises:
        HubError: a split GGUF (we load single files only).
    """
    repo_id = repo.repo if isinstance(repo, HubRepo) else repo
    hf = file if isinstance(file, HubFile) else HubFile(file, quant_of(file), 0)
    if not safe_repo_path(hf.name):
        # The name comes from a hub's listing and becomes a path under models/: a hostile or
        # broken hub must not write elsewhere ("../../.bashrc.gguf", "/etc/x.gguf", "C:\\x.gguf").
        raise HubError(f"{hf.name!r} is not a plain file name inside the repository; not downloaded")
    if hf.split:
        raise HubError(f"{hf.name} is split into {hf.parts} files; only single-file GGUFs can be loaded, "
                       "choose another quant")
    base = hf.name.rsplit("/", 1)[-1]
    # `file` keeps the repo path (a few repos keep quants in folders): downloads go to models/<that path>.
    kw = dict(id=f"hub:{repo_id}/{hf.name}", name=f"{repo_id.rsplit('/', 1)[-1]} {hf.quant}".strip(), file=hf.name,
              size_bytes=hf.size_bytes, quant=hf.quant, source_repo=repo_id, sha256=hf.sha256,
              url=file_url(hub_id, repo_id, hf.name), description=f"from {get_hub(hub_id).name}")
    known = {f.name for f in fields(ModelEntry)}
    if "sources" in known:  # the catalog's per-hub repos, once it has them
        kw["sources"] = {hub_id: repo_id}
    if "files" in known:
        kw["files"] = {hf.quant: hf.name} if hf.quant else {}
    if "instruct" in known:
        kw["instruct"] = looks_instruct(repo_id) or looks_instruct(base)
    projector = _projector_for(hf, repo.projectors if isinstance(repo, HubRepo) else [])
    if projector is not None:  # a vision repository: the model comes with its projector
        kw.update(projector=projector.name, projector_bytes=projector.size_bytes)
    return ModelEntry(**kw)


def _is_projector(name: str) -> bool:
    return name.rsplit("/", 1)[-1].lower().startswith("mmproj")


def _projector_for(model: HubFile, projectors: list[HubFile]) -> HubFile | None:
    """The projector to download with `model`: one in its folder, of its quant where the repository
    has several (llama.cpp's repos give Q8_0 and F16), else F16, else the smallest."""
    folder = model.name.rsplit("/", 1)[0] if "/" in model.name else ""
    near = [p for p in projectors if (p.name.rsplit("/", 1)[0] if "/" in p.name else "") == folder
            and safe_repo_path(p.name)]
    for quant in (model.quant, "F16"):
        same = [p for p in near if quant and p.quant == quant]
        if same:
            return same[0]
    return min(near, key=lambda p: p.size_bytes) if near else None
