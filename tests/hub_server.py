"""A tiny Hugging Face hub stand-in on 127.0.0.1: `/{repo}/resolve/{rev}/{file}` with HEAD metadata
(ETag = sha256, X-Repo-Commit), Range requests, optional throttling and corruption."""

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class HubServer:
    def __init__(self, files: dict[str, Path], throttle_bytes_per_s: float | None = None, corrupt: bool = False):
        self.files = files  # "repo/name/file.gguf" -> local file
        self.throttle, self.corrupt = throttle_bytes_per_s, corrupt
        self.ranges: list[str] = []
        self.digests = {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in files.items()}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _target(self):
                parts = self.path.lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return None
                return "/".join(parts[:2] + parts[4:])

            def _headers(self, key, start, length, size, status):
                self.send_response(status)
                self.send_header("Content-Length", str(length))
                self.send_header("ETag", f'"{server.digests[key]}"')
                self.send_header("X-Repo-Commit", "0" * 40)
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.end_headers()

            def do_HEAD(self):  # noqa: N802
                key = self._target()
                if key not in server.files:
                    self.send_error(404)
                    return
                size = server.files[key].stat().st_size
                self._headers(key, 0, size, size, 200)

            def do_GET(self):  # noqa: N802
                key = self._target()
                if key not in server.files:
                    self.send_error(404)
                    return
                data = server.files[key].read_bytes()
                if server.corrupt:
                    data = data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:]
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng:
                    server.ranges.append(rng)
                    start, status = int(rng.split("=")[1].split("-")[0]), 206
                self._headers(key, start, len(data) - start, len(data), status)
                view = memoryview(data)[start:]
                step = 1 << 16
                try:
                    for i in range(0, len(view), step):
                        self.wfile.write(view[i:i + step])
                        if server.throttle:
                            time.sleep(step / server.throttle)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
