"""Fake model hubs on 127.0.0.1 for download and search tests (no network).

HubServer: the Hugging Face routes huggingface_hub and engine/models/hubs.py use:
  HEAD/GET /{repo}/resolve/{rev}/{file}   metadata (ETag = sha256, X-Repo-Commit) and bytes, Range
  GET /api/models?search=&filter=gguf&…   search, most downloaded first
  GET /api/models/{repo}[?blobs=True]     model info, siblings with size and LFS sha256
ModelScopeServer: the ModelScope routes (see engine/models/hubs.py for where they come from):
  PUT /api/v1/dolphin/models, GET /openapi/v1/models, GET /api/v1/models/{repo}/repo/files,
  GET /api/v1/models/{repo}/repo?Revision=&FilePath=   (bytes, Range)

Both serve `files` ("owner/name/path.gguf" -> local file) and can misbehave on purpose: throttle,
corrupt one byte, close the socket after `drop_after` bytes (once), ignore Range, answer an HTML
page instead of the bytes (a captive portal), or answer a fixed status per file (`status`).
"""

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

PORTAL = b"<!DOCTYPE html><html><head><title>Sign in to Wi-Fi</title></head><body>Please log in</body></html>\n" * 40


def write_tiny_gguf(path: Path, n_floats: int = 1 << 20, seed: int = 0) -> Path:
    """A valid GGUF of one random f32 tensor (4 MiB by default): fast to serve, real to check."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(path.stem)
    w.add_tensor("w", np.random.default_rng(seed).standard_normal(n_floats).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class _FileServer:
    """Serving bytes with Range and the misbehaviours; subclasses route requests."""

    def __init__(self, files: dict[str, Path], throttle_bytes_per_s: float | None = None, corrupt: bool = False,
                 drop_after: int | None = None, ignore_range: bool = False, html: bool = False,
                 status: dict[str, int] | None = None, meta: dict[str, dict] | None = None, oversize: int = 0):
        self.files = files
        self.throttle, self.corrupt, self.drop_after = throttle_bytes_per_s, corrupt, drop_after
        self.ignore_range, self.html, self.status = ignore_range, html, dict(status or {})
        self.meta = meta or {}  # repo -> {"downloads": n, "likes": n}
        self.oversize = oversize  # bytes a GET sends beyond the size HEAD and the listing announce
        self.ranges: list[str] = []
        self.requests: list[tuple[str, str]] = []  # (method, path with query)
        self.digests = {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in files.items()}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def repos(self) -> list[str]:
        names = sorted({"/".join(k.split("/")[:2]) for k in self.files})
        return sorted(names, key=lambda r: -self.meta.get(r, {}).get("downloads", 0))

    def repo_files(self, repo: str) -> list[tuple[str, int, str]]:
        return [(k[len(repo) + 1:], p.stat().st_size, self.digests[k]) for k, p in self.files.items()
                if k.startswith(repo + "/")]

    def route(self, h, method: str, path: str, query: dict) -> None:
        raise NotImplementedError

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _go(self, method):
                server.requests.append((method, self.path))
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                query["_all"] = parse_qs(parts.query)
                server.route(self, method, unquote(parts.path), query)

            def do_HEAD(self):  # noqa: N802
                self._go("HEAD")

            def do_GET(self):  # noqa: N802
                self._go("GET")

            def do_PUT(self):  # noqa: N802
                self._go("PUT")

        return Handler

    # ---- helpers for routes
    @staticmethod
    def send_json(h, obj, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    @staticmethod
    def send_status(h, status: int) -> None:
        h.send_response(status)
        h.send_header("Content-Length", "0")
        h.end_headers()

    @staticmethod
    def body(h) -> dict:
        n = int(h.headers.get("Content-Length") or 0)
        return json.loads(h.rfile.read(n) or b"{}")

    def send_file(self, h, key: str, head: bool = False, extra: dict | None = None) -> None:
        if key not in self.files:
            self.send_status(h, 404)
            return
        if key in self.status:
            self.send_status(h, self.status[key])
            return
        if head:  # metadata only: no need to read the file
            data = b""
        else:
            data = PORTAL if self.html else self.files[key].read_bytes() + b"\0" * self.oversize
        if self.corrupt and data:
            data = data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:]
        start, status = 0, 200
        rng = h.headers.get("Range")
        if rng and not head:
            self.ranges.append(rng)
            if not self.ignore_range and not self.html:
                start, status = int(rng.split("=")[1].split("-")[0]), 206
        if start >= len(data) and status == 206:
            self.send_status(h, 416)
            return
        size = self.files[key].stat().st_size if head else len(data)
        h.send_response(status)
        h.send_header("Content-Length", str(size - start))
        h.send_header("Content-Type", "text/html" if self.html and not head else "application/octet-stream")
        h.send_header("Accept-Ranges", "bytes")
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        view = memoryview(data)[start:]
        drop, self.drop_after = self.drop_after, None  # misbehave once; the retry gets everything
        step = 1 << 16
        try:
            for i in range(0, len(view), step):
                if drop is not None and i >= drop:
                    h.close_connection = True
                    h.connection.shutdown(2)  # the socket goes away mid-body
                    return
                h.wfile.write(view[i:i + step])
                if self.throttle:
                    time.sleep(step / self.throttle)
        except (BrokenPipeError, ConnectionResetError):
            pass


class HubServer(_FileServer):
    """A Hugging Face hub stand-in (HF_ENDPOINT / ASSISTANT_HUB_HUGGINGFACE / ASSISTANT_HUB_HF_MIRROR)."""

    def route(self, h, method, path, query):
        parts = path.lstrip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) == 2:
            self._search(h, query)
        elif parts[:2] == ["api", "models"] and len(parts) >= 4:
            self._info(h, "/".join(parts[2:4]), query)
        elif len(parts) >= 5 and parts[2] == "resolve":
            key = "/".join(parts[:2] + parts[4:])
            self.send_file(h, key, head=method == "HEAD", extra={"ETag": f'"{self.digests.get(key, "")}"',
                                                                  "X-Repo-Commit": "0" * 40})
        else:
            self.send_status(h, 404)

    def _model(self, repo: str) -> dict:
        m = self.meta.get(repo, {})
        return {"id": repo, "_id": repo, "modelId": repo, "downloads": m.get("downloads", 0),
                "likes": m.get("likes", 0), "lastModified": "2025-01-02T03:04:05.000Z", "tags": ["gguf"]}

    def _search(self, h, query):
        words = query.get("search", "").lower()
        found = [self._model(r) for r in self.repos() if words in r.lower()]
        self.send_json(h, found[: int(query.get("limit", 1000))])

    def _info(self, h, repo, query):
        if repo not in self.repos():
            self.send_json(h, {"error": "Repository not found"}, 404)
            return
        siblings = [{"rfilename": name, "size": size, "blobId": sha[:40],
                     "lfs": {"size": size, "sha256": sha, "pointerSize": 134}} if query.get("blobs") else
                    {"rfilename": name} for name, size, sha in self.repo_files(repo)]
        self.send_json(h, {**self._model(repo), "sha": "0" * 40, "siblings": siblings})


class ModelScopeServer(_FileServer):
    """A ModelScope stand-in (ASSISTANT_HUB_MODELSCOPE). `dolphin=False` answers 404 to the web site's
    search route, so the OpenAPI fallback is used."""

    def __init__(self, files, dolphin: bool = True, **kw):
        self.dolphin = dolphin
        super().__init__(files, **kw)

    def route(self, h, method, path, query):
        parts = path.lstrip("/").split("/")
        if method == "PUT" and path == "/api/v1/dolphin/models" and self.dolphin:
            self._dolphin(h, self.body(h))
        elif method == "GET" and path == "/openapi/v1/models":
            self._openapi(h, query)
        elif parts[:3] == ["api", "v1", "models"] and parts[5:] == ["repo", "files"]:
            self._files(h, "/".join(parts[3:5]), query)
        elif parts[:3] == ["api", "v1", "models"] and parts[5:] == ["repo"] and "FilePath" in query:
            self.send_file(h, "/".join(parts[3:5]) + "/" + query["FilePath"], head=method == "HEAD")
        else:
            self.send_json(h, {"Code": 10010205001, "Message": "not found", "Success": False}, 404)

    def _matches(self, words: str) -> list[str]:
        return [r for r in self.repos() if words.lower() in r.lower()]

    def _dolphin(self, h, body):
        found = self._matches(body.get("Name", ""))[: body.get("PageSize", 10)]
        models = [{"Path": r.split("/")[0], "Name": r.split("/")[1], "LastUpdatedTime": 1735787045,
                   "Downloads": self.meta.get(r, {}).get("downloads", 0), "Stars": self.meta.get(r, {}).get("likes", 0)}
                  for r in found]
        self.send_json(h, {"Code": 200, "Data": {"Model": {"Models": models, "TotalCount": len(models)}},
                           "Success": True})

    def _openapi(self, h, query):
        found = self._matches(query.get("search", ""))[: int(query.get("page_size", 10))]
        models = [{"id": r, "downloads": self.meta.get(r, {}).get("downloads", 0),
                   "likes": self.meta.get(r, {}).get("likes", 0), "last_modified": 1735787045} for r in found]
        self.send_json(h, {"success": True, "data": {"models": models, "total_count": len(models)}})

    def _files(self, h, repo, query):
        if repo not in self.repos():
            self.send_json(h, {"Code": 10010205001, "Message": "model not found", "Success": False}, 404)
            return
        files = [{"Name": name.rsplit("/", 1)[-1], "Path": name, "Size": size, "Sha256": sha, "Type": "blob",
                  "Revision": "0" * 40} for name, size, sha in self.repo_files(repo)]
        self.send_json(h, {"Code": 200, "Data": {"Files": files}, "Success": True})
