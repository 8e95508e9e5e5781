"""The local OpenAI-compatible API server (issue 16): a front-end like the window and the terminal,
coming in through `engine.api` only.

    from engine.server import ApiServer, ServerConfig, load_api_key
    server = ApiServer(assistant, ServerConfig(api_key=load_api_key())).start()

This package is the server's door: a front-end that runs it (the window beside its own chats,
`assistant serve` alone) imports the names below from `engine.server` and none of its modules;
`engine.api` never names the server (tests/test_layers.py). The window serves beside its chats
with `serve_in_background(assistant, settings, post=...)`, `post` putting the server's jobs on its
own engine thread (engine_thread.py).

Layout: `config.py` (bind, key file, limits), `guard.py` (Host, Origin, key, body checks),
`protocol.py` (header deadline), `app.py` (endpoints), `schema.py` (request checks), `shapes.py`
(response shapes), `history.py` (stateless clients → engine conversations), `fair_queue.py`,
`engine_thread.py` (the one thread that calls the Assistant), `server.py` (uvicorn, start/stop).
"""

from engine.server.config import (ServerConfig, ServerConfigError, api_key_path, client_url, is_loopback, load_api_key,
                                  new_api_key)
from engine.server.server import ApiServer, serve_in_background

__all__ = ["ApiServer", "ServerConfig", "ServerConfigError", "api_key_path", "client_url", "is_loopback",
           "load_api_key", "new_api_key", "serve_in_background"]
