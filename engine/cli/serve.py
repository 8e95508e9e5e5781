"""`assistant serve`: the local OpenAI-compatible API on the same engine as `assistant chat`."""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
from pathlib import Path

from engine.api import Assistant, ModelLoadError, ModelNotFound, Settings, StorageError
from engine.cli.output import EXIT_FAILED, EXIT_MODEL, EXIT_OK, EXIT_USAGE
from engine.server import ApiServer, ServerConfig, ServerConfigError, api_key_path, load_api_key

log = logging.getLogger("assistant.serve")

KEY_ENV = "ASSISTANT_API_KEY"  # a key for this run without a flag: other users cannot read a process's environment


def add_serve_parser(subparsers) -> None:
    s = subparsers.add_parser(
        "serve", help="serve an OpenAI-compatible API on this computer (127.0.0.1, an API key required)",
        description="Serve /v1/chat/completions, /v1/completions, /v1/embeddings and /v1/models on the "
                    "engine (router, KV reuse, memory, documents). Loopback only unless --allow-network; "
                    "every /v1 request needs the API key (Authorization: Bearer KEY).")
    s.add_argument("--host", help="address to listen on (default: setting server.host, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default: setting server.port, 8765; 0 = any free port)")
    key = s.add_mutually_exclusive_group()
    key.add_argument("--api-key-file", metavar="PATH", type=Path,
                     help="read this run's key from a file (default: $ASSISTANT_API_KEY, else the key stored "
                          "in the data dir, made on first use)")
    key.add_argument("--api-key", metavar="KEY",
                     help="use this key for this run; every user of this computer can read it in the process "
                          "list: prefer --api-key-file or $ASSISTANT_API_KEY")
    s.add_argument("--allow-network", action="store_true",
                   help="allow a --host other machines can reach (the key is still required)")
    s.add_argument("--cors", nargs="+", metavar="ORIGIN",
                   help="browser origins allowed to call the API, e.g. http://localhost:3000 (default: CORS off)")
    s.add_argument("--model", help="one model (catalog id or .gguf path) for L1 and L2 instead of the tiers")
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    settings = Settings.shared()
    if args.port is not None and not 0 <= args.port <= 65535:
        return _fail("--port must be from 0 to 65535", EXIT_USAGE)
    try:
        key, where = _run_key(args)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    config = ServerConfig.from_settings(settings, host=args.host, port=args.port, api_key=key,
                                        allow_network=args.allow_network or None,
                                        cors_origins=tuple(o.rstrip("/") for o in args.cors) if args.cors else None)
    try:
        config.check()
    except ServerConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    try:
        assistant = Assistant.from_settings(settings, model=args.model, debug=args.debug)
    except (ModelNotFound, ModelLoadError) as exc:
        return _fail(str(exc), EXIT_MODEL)
    except StorageError as exc:
        return _fail(str(exc), EXIT_FAILED)
    try:
        for warning in assistant.warnings:
            sys.stderr.write(f"warning: {warning}\n")
        server = ApiServer(assistant, config, settings)

        def ready() -> None:
            sys.stdout.write(f"Serving the OpenAI-compatible API at {server.url}\n"
                             f"API key: {where} (send it as Authorization: Bearer KEY)\n"
                             "Ctrl-C stops the server.\n")
            sys.stdout.flush()

        server.run(on_ready=ready)
    except OSError as exc:
        return _fail(str(exc), EXIT_FAILED)
    finally:
        assistant.close()
    return EXIT_OK


def _run_key(args: argparse.Namespace) -> tuple[str, str]:
    """(the key for this run, where it came from): --api-key-file, --api-key, $ASSISTANT_API_KEY,
    else the stored key (made on first use).

    Raises:
        ValueError: the key file cannot be read or is empty.
    """
    if args.api_key_file is not None:
        path = args.api_key_file
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            lines = path.read_text(encoding="utf-8").strip().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--api-key-file {path}: {getattr(exc, 'strerror', None) or exc}") from None
        if not lines or not lines[0].strip():
            raise ValueError(f"--api-key-file {path} is empty: put the key on its first line")
        if mode & 0o077 and os.name == "posix":
            sys.stderr.write(f"warning: {path} can be read by other users; chmod 600 {path}\n")
        return lines[0].strip(), f"read from {path}"
    if args.api_key:
        sys.stderr.write("warning: --api-key shows the key to every user of this computer in the process list; "
                         f"use --api-key-file PATH or the {KEY_ENV} environment variable\n")
        return args.api_key, "given with --api-key"
    if os.environ.get(KEY_ENV, "").strip():
        return os.environ[KEY_ENV].strip(), f"from ${KEY_ENV}"
    return load_api_key(create=True), f"stored in {api_key_path()}"


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return code
