"""mcp.json: the MCP servers the user configured, in the format Claude Desktop, Cursor and LM Studio
read, so a file written for one of them works here as it is:

    {"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "~"],
                              "env": {"TOKEN": "…"}},
                    "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer …"}}}}

Beyond it, two keys Cline already reads: `timeout` (seconds a call may take; 30 by default) and
`disabled`. A `type` of "stdio", "http" or "streamable-http" is accepted (VS Code writes it);
"sse", the transport MCP deprecated, is refused with a clear word.

Secrets: `env` and `headers` values are passed to the server and never logged or shown
(`McpServerConfig.shown` masks them); the file itself is written owner-only.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.config.locked_file import locked, write_atomic
from engine.config.paths import private_file, user_dir
from engine.tools.base import DEFAULT_TIMEOUT_S

MAX_FILE_BYTES = 1 << 20  # a config, not a data file: larger is a mistake, said as one
MASK = "••••••"
_KNOWN = {"command", "args", "env", "cwd", "url", "headers", "type", "timeout", "disabled"}


class McpConfigError(ValueError):
    """mcp.json (or a file to import) cannot be read; the message says where and why."""


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    command: str = ""           # stdio: the program to start …
    args: tuple[str, ...] = ()  # … its arguments
    env: dict = field(default_factory=dict, compare=True)  # … extra environment (secrets)
    cwd: str = ""
    url: str = ""               # streamable HTTP: the endpoint …
    headers: dict = field(default_factory=dict)  # … sent with every request (secrets)
    timeout_s: float = DEFAULT_TIMEOUT_S
    disabled: bool = False
    extra: dict = field(default_factory=dict)  # keys other apps write, kept when the file is rewritten

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    @property
    def key(self) -> str:
        """One line for a log or a list, secrets left out."""
        return masked_url(self.url) if self.url else " ".join((self.command, *self.args))

    def shown(self) -> dict:
        """What the window may show: env and header names, their values masked, and a URL's
        query values and password (some servers take a key there)."""
        out = self.as_json()
        for part in ("env", "headers"):
            if part in out:
                out[part] = {k: MASK for k in out[part]}
        if "url" in out:
            out["url"] = masked_url(out["url"])
        return out

    def __repr__(self) -> str:  # a stray log line or trace never carries a secret
        return f"McpServerConfig({self.name!r}, {self.transport}, {self.key!r})"

    def as_json(self) -> dict:
        out = dict(self.extra)
        if self.url:
            out["url"] = self.url
            if self.headers:
                out["headers"] = dict(self.headers)
        else:
            out["command"] = self.command
            if self.args:
                out["args"] = list(self.args)
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd:
                out["cwd"] = self.cwd
        if self.timeout_s != DEFAULT_TIMEOUT_S:
            out["timeout"] = self.timeout_s
        if self.disabled:
            out["disabled"] = True
        return out


def masked_url(url: str) -> str:
    """`url` with its password and query values masked."""
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password:
            netloc = netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
        query = "&".join(f"{k}={MASK}" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return MASK


def parse_server(name: str, entry) -> McpServerConfig:
    """One `mcpServers` entry; McpConfigError names the server and the field."""
    where = f"server {name!r}"
    if not isinstance(name, str) or not name.strip() or len(name) > 64 or "/" in name:
        raise McpConfigError(f"{where}: a name is 1–64 characters without '/'")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where}: expected an object with \"command\" or \"url\"")
    kind = entry.get("type", "")
    if kind in ("sse",):
        raise McpConfigError(f"{where}: the SSE transport is not supported (MCP deprecated it); "
                             "use the server's streamable HTTP endpoint")
    if kind not in ("", "stdio", "http", "streamable-http", "streamableHttp"):
        raise McpConfigError(f"{where}: unknown type {kind!r} (stdio or http)")
    url, command = entry.get("url", ""), entry.get("command", "")
    if bool(url) == bool(command):
        raise McpConfigError(f"{where}: give either \"command\" (a local program) or \"url\" (an HTTP server)")
    if url and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise McpConfigError(f"{where}: \"url\" must be an http:// or https:// address")
    if command and not isinstance(command, str):
        raise McpConfigError(f"{where}: \"command\" must be a string")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"{where}: \"args\" must be a list of strings")
    env, headers = entry.get("env", {}), entry.get("headers", {})
    for part, value in (("env", env), ("headers", headers)):
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise McpConfigError(f"{where}: \"{part}\" must map names to strings")
    cwd = entry.get("cwd", "")
    if not isinstance(cwd, str):
        raise McpConfigError(f"{where}: \"cwd\" must be a string")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise McpConfigError(f"{where}: \"timeout\" is seconds, more than 0 and at most 3600")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise McpConfigError(f"{where}: \"disabled\" must be true or false")
    extra = {k: v for k, v in entry.items() if k not in _KNOWN}
    return McpServerConfig(name, command, tuple(args), dict(env), cwd, url, dict(headers), float(timeout),
                           disabled, extra)


def parse(text: str, source: str = "mcp.json") -> tuple[list[McpServerConfig], list[str]]:
    """The servers of a config's text, and a problem line for each entry left out (one bad entry
    does not cost the others). McpConfigError: the file as a whole is unreadable."""
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise McpConfigError(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise McpConfigError(f"{source}: expected a JSON object with \"mcpServers\"")
    # LM Studio and Claude Desktop write "mcpServers"; VS Code "servers".
    servers = data.get("mcpServers", data.get("servers", {}))
    if not isinstance(servers, dict):
        raise McpConfigError(f"{source}: \"mcpServers\" must be an object of named servers")
    out, problems = [], []
    for name, entry in servers.items():
        try:
            out.append(parse_server(name, entry))
        except McpConfigError as exc:
            problems.append(f"{source}: {exc}")
    return out, problems


def read(path: Path) -> tuple[list[McpServerConfig], list[str]]:
    """The servers in a file (none when it does not exist)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise McpConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise McpConfigError(f"{path} is over {MAX_FILE_BYTES >> 20} MB: not an MCP config")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise McpConfigError(f"{path} is not UTF-8 text") from None
    return parse(text, str(path))


def config_path() -> Path:
    return user_dir() / "mcp.json"


def write(path: Path, servers: list[McpServerConfig]) -> None:
    """Rewrite the file with `servers`, keeping the top-level keys other apps put there. Owner-only:
    it holds secrets."""
    with locked(path):
        try:
            data = json.loads(path.read_text("utf-8-sig")) if path.exists() else {}
        except (OSError, ValueError):
            data = {}  # unreadable: rewritten whole (load() said why before anything could change it)
        if not isinstance(data, dict):
            data = {}
        data.pop("servers", None)
        data["mcpServers"] = {s.name: s.as_json() for s in servers}
        write_atomic(path, (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
        private_file(path)


def known_configs() -> list[tuple[str, Path]]:
    """Other apps' MCP configs on this machine that exist: (app, path)."""
    home = Path.home()
    appdata = Path(os.environ.get("APPDATA", home / "AppData" / "Roaming"))
    if sys.platform == "darwin":
        claude = home / "Library" / "Application Support" / "Claude"
    elif sys.platform == "win32":
        claude = appdata / "Claude"
    else:
        claude = Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "Claude"
    found = [("Claude Desktop", claude / "claude_desktop_config.json"), ("LM Studio", home / ".lmstudio" / "mcp.json"),
             ("Cursor", home / ".cursor" / "mcp.json")]
    return [(app, p) for app, p in found if p.is_file()]


@dataclass
class ImportReport:
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why"
    problems: list[str] = field(default_factory=list)


def import_into(target: Path, source: Path) -> ImportReport:
    """Add `source`'s servers to `target` (mcp.json). A name already there is kept as it is, and
    the imported one is skipped with a reason: nothing the user set up is overwritten."""
    incoming, problems = read(source)
    report = ImportReport(problems=problems)
    with locked(target):
        current, _ = read(target)
        names = {s.name for s in current}
        for server in incoming:
            if server.name in names:
                same = next(s for s in current if s.name == server.name)
                report.skipped.append(f"{server.name}: " + ("already here" if replace(same, disabled=False)
                                                            == replace(server, disabled=False)
                                                            else "a different server has this name here"))
                continue
            current.append(server)
            names.add(server.name)
            report.added.append(server.name)
        if report.added:
            write(target, current)
    return report
