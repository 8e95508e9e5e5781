"""The local OpenAI-compatible API server (issue 16): a front-end like the window and the terminal,
coming in through `engine.api` only.

    from engine.server import ApiServer, ServerConfig, load_api_key
    server = ApiServer(assistant, ServerConfig(api_key=load_api_key())).start()

Layout: `config.py` (bind, key file, limits), `guard.py` (Host, Origin, key, body checks),
`protocol.py` (header deadline), `app.py` (endpoints), `schema.py` (request checks), `shapes.py`
(response shapes), `history.py` (stateless clients → engine conversations), `fair_queue.py`,
`engine_thread.py` (the one thread that calls the Assistant), `server.py` (uvicorn, start/stop).
"""

from engine.server.config import ServerConfig, ServerConfigError, api_key_path, is_loopback, load_api_key
from engine.server.server import ApiServer

__all__ = ["ApiServer", "ServerConfig", "ServerConfigError", "api_key_path", "is_loopback", "load_api_key"]
