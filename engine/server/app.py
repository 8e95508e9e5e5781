"""The ASGI app: OpenAI's endpoints on Starlette, behind the guards (engine/server/guard.py).

    GET  /health                 liveness (no key)
    GET  /v1/models              auto, L1, L2, L3 and the installed catalog models
    POST /v1/chat/completions    whole or streamed (SSE); x_docs → x_sources; x_memory
    POST /v1/completions         the prompt answered as one user message
    POST /v1/embeddings          the memory's embedding model

Turns and embeddings go through the fair queue to the engine thread; this side only translates.
A request that waits longer than `request_timeout_s`, or whose client disconnects, has its job
cancelled. An embeddings request is a job like a turn, `EMBED_SLICE` texts a turn on the engine
(engine/server/engine_thread.py), so that 2 048 long inputs neither hold the engine nor go on for
a client that left. The event loop never drives the Assistant: it reads what the engine thread
publishes (`published_tiers`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import TYPE_CHECKING, AsyncIterator

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.api import (Chunk, ReasoningChunk, Retracted, ToolCallEvent, ToolResultEvent, TurnDone, TurnFold,
                        unknown_event)
from engine.server import errors
from engine.server.engine_thread import END, Job, embed_work, turn_work
from engine.server.fair_queue import Client
from engine.server.guard import BodyLimit, HostGuard, KeyGuard, OriginGuard
from engine.server.peers import Peers
from engine.server.schema import RequestError, parse_embedding_input, parse_json, parse_turn
from engine.server.shapes import Shape

if TYPE_CHECKING:
    from engine.server.server import ApiServer

log = logging.getLogger(__name__)

LEVELS = ("auto", "L1", "L2", "L3")


class Timeout(Exception):
    pass


def error_response(exc: BaseException) -> JSONResponse:
    status, _, _, headers = errors.describe(exc)
    if status >= 500 and not isinstance(exc, errors.EXPECTED):
        log.error("API request failed", exc_info=exc)
    return JSONResponse(errors.body(exc), status_code=status, headers=headers)


def _user(body: dict) -> str:
    user = body.get("user") if isinstance(body, dict) else None
    return user if isinstance(user, str) else ""


async def _watch_disconnect(request: Request, job: Job, server: "ApiServer") -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.stop("disconnected")
            if server.queue.remove(job.client, job):  # still waiting: it never reaches the engine
                job.events.put_nowait(END)
            return


async def _next(job: Job, deadline: float) -> object:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise Timeout
    try:
        return await asyncio.wait_for(job.events.get(), remaining)
    except TimeoutError:
        raise Timeout from None


class Endpoints:
    def __init__(self, server: "ApiServer"):
        self.server = server
        self.created = int(time.time())
        self.peers = Peers()  # the fairness key's peer; `user` is only a sub-key (engine/server/fair_queue.py)

    @property
    def config(self):
        return self.server.config

    async def health(self, request: Request) -> Response:
        if not self.server.engine.alive:
            return JSONResponse({"status": "engine stopped"}, status_code=503)
        return JSONResponse({"status": "ok"})

    def _model_ids(self) -> list[str]:
        return list(LEVELS) + sorted(self.server.installed)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model(m) for m in self._model_ids()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        if name not in self._model_ids():
            return error_response(RequestError(f"the model {name!r} does not exist here", "model", 404,
                                               "model_not_found"))
        return JSONResponse(self._model(name))

    def _model(self, name: str) -> dict:
        tiers = self.server.assistant.published_tiers
        on = [level for level, model in tiers.items() if model == name]
        return {"id": name, "object": "model", "created": self.created, "owned_by": "local",
                "x_tiers": on if name not in LEVELS else [name]}

    async def chat(self, request: Request) -> Response:
        return await self._turn(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._turn(request, chat=False)

    async def _turn(self, request: Request, chat: bool) -> Response:
        deadline = time.monotonic() + self.config.request_timeout_s
        server = self.server
        try:
            body = parse_json(await request.body())
            client = await self.peers.client(request.scope)
            # Off the event loop: a schema's or tools' grammar is written and parsed by llama.cpp
            # here (tens of milliseconds for a large one), and the loop serves every connection.
            turn = await run_in_threadpool(
                parse_turn, body, tiers=dict(server.assistant.published_tiers), installed=server.installed,
                max_messages=self.config.max_messages, repetition_guard=server.repetition_guard, client=client,
                completion=not chat, key=server.key_tag, allow_memory=self.config.allow_memory,
                allow_docs=self.config.allow_docs, count_tokens=server.assistant.count_tokens,
                max_tool_tokens=self.config.max_tool_tokens)
            job = Job(turn.client, turn_work(turn, server.conversations), asyncio.get_running_loop())
            server.queue.put(job.client, job)
        except Exception as exc:  # noqa: BLE001 - every refusal is an HTTP answer
            return error_response(exc)
        shape = Shape(chat, turn.model, turn.logprobs, turn.docs not in (None, False))
        watcher = asyncio.create_task(_watch_disconnect(request, job, server))
        try:
            first = await _next(job, deadline)
            if isinstance(first, BaseException) or first is END:
                return self._failed(job, first)
            if turn.stream:
                watcher.cancel()  # the SSE response listens for the disconnect from here on
                return EventSourceResponse(self._stream(job, turn, shape, first, deadline), ping=15)
            return await self._whole(job, shape, first, deadline)
        except Timeout:
            job.stop("timeout")
            return self._timed_out()
        finally:
            watcher.cancel()

    def _failed(self, job: Job, item: object) -> Response:
        if isinstance(item, BaseException):
            return error_response(item)
        if job.why == "shutdown":
            return error_response(errors.QueueClosed("the server is shutting down"))
        if job.why == "disconnected":  # nobody reads this: the client is gone
            return JSONResponse({"error": {"message": "the client closed the connection", "type": "server_error",
                                           "param": None, "code": "cancelled"}}, status_code=499)
        return error_response(RuntimeError("the request ended without an answer"))

    def _timed_out(self) -> Response:
        return JSONResponse({"error": {"message": f"the request took longer than {self.config.request_timeout_s:g} s"
                                       " (setting server.request_timeout_s); its answer was stopped",
                                       "type": "server_error", "param": None, "code": "timeout"}}, status_code=504)

    async def _whole(self, job: Job, shape: Shape, item: object, deadline: float) -> Response:
        fold = TurnFold()  # a cascade's retraction empties the chunks: the answer is the next one
        while item is not END:
            if isinstance(item, BaseException):
                return error_response(item)
            fold.take(item)
            item = await _next(job, deadline)
        if fold.final is None or fold.final is not fold.answers[-1] or job.why is not None:
            return self._failed(job, item)
        return JSONResponse(shape.whole(fold.chunks, fold.answers))  # usage counts every answer computed

    async def _stream(self, job: Job, turn, shape: Shape, item: object, deadline: float) -> AsyncIterator[dict]:
        dones: list[TurnDone] = []
        ended = False
        try:
            start = shape.first()
            if start is not None:
                yield {"data": _json(start)}
            while item is not END:
                if isinstance(item, BaseException):
                    yield {"data": _json(errors.body(item))}
                    ended = True
                    return
                match item:
                    case Chunk() | ReasoningChunk():
                        delta = shape.delta(item)
                        if delta is not None:
                            yield {"data": _json(delta)}
                    case TurnDone():
                        dones.append(item)
                    case Retracted():  # never: engine_thread turns the cascade off for streams
                        yield {"data": _json(errors.body(RuntimeError("a streamed answer cannot be taken back")))}
                        ended = True
                        return
                    case ToolCallEvent() | ToolResultEvent():
                        pass  # the client runs its own tools: the engine runs none for an API turn
                    case _:
                        unknown_event(item)
                try:
                    item = await _next(job, deadline)
                except Timeout:
                    job.stop("timeout")
                    body = self._timed_out().body
                    yield {"data": body.decode()}
                    ended = True
                    return
            ended = True
            if not dones:
                yield {"data": _json({"error": {"message": f"the answer stopped ({job.why or 'no answer'})",
                                                "type": "server_error", "param": None, "code": job.why}})}
                return
            calls = shape.calls(dones[-1])
            if calls is not None:
                yield {"data": _json(calls)}
            yield {"data": _json(shape.last(dones[-1]))}
            if turn.include_usage:
                yield {"data": _json(shape.usage_chunk(dones))}
            yield {"data": "[DONE]"}
        finally:
            if not ended:
                job.stop("disconnected")  # the client left mid-answer (or the server is stopping)

    async def embeddings(self, request: Request) -> Response:
        deadline = time.monotonic() + self.config.request_timeout_s
        server = self.server
        try:
            body = parse_json(await request.body())
            texts = parse_embedding_input(body)
            model = server.assistant.embedding_model()
            if model is None:
                raise RequestError("there is no embedding model: the memory is off (setting memory.enabled)",
                                   "model", 400, "no_embedding_model")
            client = Client(await self.peers.client(request.scope), _user(body))
            job = Job(client, embed_work(texts, self.config.max_embedding_tokens), asyncio.get_running_loop())
            server.queue.put(job.client, job)
        except Exception as exc:  # noqa: BLE001 - every refusal is an HTTP answer
            return error_response(exc)
        watcher = asyncio.create_task(_watch_disconnect(request, job, server))
        vectors = None
        try:
            item = await _next(job, deadline)
            while item is not END:
                if isinstance(item, BaseException):
                    return error_response(item)
                vectors = item
                item = await _next(job, deadline)
        except Timeout:
            job.stop("timeout")
            if server.queue.remove(job.client, job):  # between two turns: it takes no more
                job.events.put_nowait(END)
            return self._timed_out()
        finally:
            watcher.cancel()
        if vectors is None or job.why is not None:
            return self._failed(job, item)
        try:
            dims = body.get("dimensions")
            if dims is not None and dims != vectors.shape[1]:
                raise RequestError(f"this model gives {vectors.shape[1]} dimensions", "dimensions")
        except Exception as exc:  # noqa: BLE001 - every refusal is an HTTP answer
            return error_response(exc)
        # 2 048 vectors as JSON take ~0.5 s to write: off the event loop, which serves everyone.
        return await run_in_threadpool(_embeddings_response, vectors, model, body.get("encoding_format") == "base64")


def _embeddings_response(vectors, model: str, as_base64: bool) -> JSONResponse:
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if as_base64 else v.tolist()}
            for i, v in enumerate(vectors)]
    # The embedder's word pieces are not counted (its tokenizer is not behind the front door).
    return JSONResponse({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": 0, "total_tokens": 0}})


def _json(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False)


def create_app(server: "ApiServer") -> Starlette:
    """The Starlette app for `server`, guards outermost first (engine/server/guard.py)."""
    config = server.config
    api = Endpoints(server)
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/models/{model:path}", api.model, methods=["GET"]),
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/embeddings", api.embeddings, methods=["POST"]),
    ]
    middleware = [Middleware(HostGuard, allowed=config.allowed_hosts()),
                  Middleware(OriginGuard, origins=config.cors_origins)]
    if config.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                                     allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"],
                                     max_age=600))
    middleware += [Middleware(KeyGuard, key=config.api_key),
                   Middleware(BodyLimit, max_bytes=config.max_body_bytes, timeout_s=config.body_timeout_s)]
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={Exception: lambda request, exc: error_response(exc)})
