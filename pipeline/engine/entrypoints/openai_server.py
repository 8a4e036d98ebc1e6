"""OpenAI-compatible HTTP server over one resident engine (`quire engine serve`).

Any OpenAI client can send region crops as base64 data-URL image parts; requests from all connections
share the engine's continuous batches. The server never fetches remote image URLs. Bad input is a 400
(an unknown model a 404) with an OpenAI-style error body, never a 500; a client that goes away, streaming
or not, has its engine request aborted so it stops taking batch slots. An absent `temperature` is 0
(greedy), the OCR default, rather than OpenAI's 1 (see `openai_schemas`).

A streaming request is prepared and admitted before the response starts, so a refused image or a prompt
that can never fit the KV cache is still a 400 rather than an error event inside a 200 stream.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from jinja2 import TemplateError
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from ..engine import Engine
from ..images import ImageError
from ..request import Delta, EngineError, Output, Request
from ..sequence import Sequence
from .openai_schemas import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    Choice,
    ChunkChoice,
    ChunkDelta,
    ContentPart,
    ErrorBody,
    ModelCard,
    ModelList,
    OpenAIErrorResponse,
    TextPart,
    Usage,
)

T = TypeVar("T")

# OpenAI's finish_reason has no "repetition": a runaway loop cut by the guard is a normal stop to clients.
# The engine's own reason is sent as well, in `quire_finish_reason`.
OPENAI_FINISH_REASONS = {"repetition": "stop"}
DEFAULT_MAX_TOKENS = 1024


class RequestRefused(Exception):
    """A request the server refuses, rendered as OpenAI's `{"error": {...}}` body with `status`."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


def openai_app(engine: Engine, model_name: str, default_max_tokens: int = DEFAULT_MAX_TOKENS) -> FastAPI:
    """The app serving `engine` as `model_name`; `default_max_tokens` applies when a request sets no limit."""
    app = FastAPI(title="Quire engine (OpenAI-compatible)")
    _install_error_handlers(app)
    started = int(time.time())

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> ModelList:
        return ModelList(data=[ModelCard(id=model_name, created=started)])

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, raw: HttpRequest) -> ChatCompletion | StreamingResponse:
        if body.model and body.model != model_name:
            raise RequestRefused(404, "model_not_found", f"model {body.model!r} is not served here; this server "
                                 f"serves {model_name!r}", param="model")
        sequence = await _prepare(engine, to_engine_request(body, default_max_tokens))
        reply = _Reply(sequence.request_id, int(time.time()), model_name)
        if body.stream:
            return await _stream(engine, sequence, reply, raw, body.include_usage)
        return await _complete(engine, sequence, reply, raw)

    return app


# -- request translation ------------------------------------------------------------------------------


def to_engine_request(body: ChatCompletionRequest, default_max_tokens: int = DEFAULT_MAX_TOKENS) -> Request:
    """The engine request for an OpenAI body; image data URLs are decoded here, images are checked later."""
    return Request(
        messages=[_engine_message(m) for m in body.messages],
        max_tokens=body.completion_limit or default_max_tokens,
        temperature=body.temperature, top_p=body.top_p, top_k=max(body.top_k, 0), seed=body.seed,
        stop=body.stop_strings, ignore_eos=body.ignore_eos, skip_special_tokens=body.skip_special_tokens,
        request_id=f"chatcmpl-{uuid.uuid4().hex}")


def _engine_message(message: ChatMessage) -> dict[str, Any]:
    """The processor's message shape; `developer` is OpenAI's newer name for `system`."""
    role = "system" if message.role == "developer" else message.role
    if not isinstance(message.content, list):
        return {"role": role, "content": message.content or ""}
    parts = [_engine_part(part) for part in message.content]
    if role != "user" and any(part["type"] == "image" for part in parts):
        raise RequestRefused(400, "invalid_request", f"images are only accepted in user messages, not {message.role}",
                             param="messages")
    return {"role": role, "content": parts}


def _engine_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image", "image": decode_data_url(part.image_url.url)}


def decode_data_url(url: str) -> bytes:
    """The bytes of a base64 `data:` URL. Remote URLs are refused: fetching them would let any client make
    the server issue requests, and a crop the caller already holds has no reason to take a detour."""
    header, comma, payload = url.partition(",")
    if not url.startswith("data:") or not comma:
        raise RequestRefused(400, "invalid_image_url", "image_url must be a data URL such as "
                             "data:image/png;base64,...; this server never fetches remote images", param="messages")
    if not header.endswith(";base64"):
        raise RequestRefused(400, "invalid_image_url", "image data URLs must be base64-encoded", param="messages")
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except binascii.Error as exc:
        raise RequestRefused(400, "invalid_image_url", f"image data URL is not valid base64 ({exc})",
                             param="messages") from exc


async def _prepare(engine: Engine, request: Request) -> Sequence:
    """Tokenise and preprocess off the event loop; every refusal of the input becomes a 400."""
    try:
        return await asyncio.to_thread(engine.prepare, request)
    except (ImageError, EngineError) as exc:
        raise RequestRefused(400, exc.code, str(exc), param="messages") from exc
    except (ValueError, TemplateError) as exc:  # e.g. a literal image placeholder typed into the text
        raise RequestRefused(400, "invalid_request", str(exc), param="messages") from exc


async def _admitted(awaitable: Awaitable[T]) -> T:
    """Await the engine; a request it refuses on admission (prompt_too_long, ...) is the client's error."""
    try:
        return await awaitable
    except EngineError as exc:
        raise RequestRefused(400, exc.code, str(exc)) from exc


# -- responses ----------------------------------------------------------------------------------------


class DisconnectGuard:
    """Aborts the engine request as soon as the HTTP client goes away.

    Starlette stops a streaming body on disconnect, but its task may be parked in `send` rather than in the
    engine stream, and a non-streaming handler is never told at all. A task waiting on the ASGI receive
    channel covers both, so an abandoned request never keeps decoding.
    """

    def __init__(self, raw: HttpRequest, engine: Engine, request_id: str) -> None:
        self._task = asyncio.create_task(self._watch(raw, engine, request_id))

    @staticmethod
    async def _watch(raw: HttpRequest, engine: Engine, request_id: str) -> None:
        while (await raw.receive())["type"] != "http.disconnect":
            pass
        engine.cancel(request_id)

    def close(self) -> None:
        self._task.cancel()


@dataclass(frozen=True)
class _Reply:
    """What every object of one reply repeats: its id, creation time and model."""

    id: str
    created: int
    model: str

    def completion(self, out: Output) -> ChatCompletion:
        choice = Choice(message=AssistantMessage(content=out.text), finish_reason=_openai_reason(out.finish_reason),
                        quire_finish_reason=out.finish_reason)
        usage = Usage.of(out.prompt_tokens, out.generated_tokens, out.cached_tokens)
        return ChatCompletion(id=self.id, created=self.created, model=self.model, choices=[choice], usage=usage)

    def chunk(self, delta: ChunkDelta, finish_reason: str | None = None) -> str:
        choice = ChunkChoice(delta=delta, finish_reason=finish_reason and _openai_reason(finish_reason),
                             quire_finish_reason=finish_reason)
        return _sse(ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[choice]))

    def usage_chunk(self, usage: Usage) -> str:
        """OpenAI's `include_usage` chunk: after the finish chunk, with no choices."""
        return _sse(ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[], usage=usage))


def _openai_reason(reason: str) -> str:
    return OPENAI_FINISH_REASONS.get(reason, reason)


def _sse(event: BaseModel) -> str:
    return f"data: {event.model_dump_json()}\n\n"


async def _complete(engine: Engine, sequence: Sequence, reply: _Reply, raw: HttpRequest) -> ChatCompletion:
    guard = DisconnectGuard(raw, engine, sequence.request_id)
    try:
        out = await _admitted(asyncio.wrap_future(engine.submit(sequence)))
    finally:
        guard.close()
    return reply.completion(out)


async def _stream(engine: Engine, sequence: Sequence, reply: _Reply, raw: HttpRequest,
                  include_usage: bool) -> StreamingResponse:
    """Wait for the first delta before answering 200, so that admission errors can still be a 400."""
    guard = DisconnectGuard(raw, engine, sequence.request_id)
    deltas = engine.stream(sequence)
    try:
        first = await _admitted(anext(deltas))
    except BaseException:
        guard.close()
        await deltas.aclose()
        raise
    events = _events(first, deltas, sequence, reply, include_usage, guard)
    return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _events(first: Delta, deltas: AsyncIterator[Delta], sequence: Sequence, reply: _Reply,
                  include_usage: bool, guard: DisconnectGuard) -> AsyncIterator[str]:
    """The SSE body: a role chunk, content chunks, the finish chunk, optionally usage, then [DONE]."""
    completion_tokens = 0
    try:
        yield reply.chunk(ChunkDelta(role="assistant", content=""))
        async for delta in _prepend(first, deltas):
            completion_tokens += len(delta.token_ids)
            if delta.text:
                yield reply.chunk(ChunkDelta(content=delta.text))
            if delta.finish_reason is not None:
                yield reply.chunk(ChunkDelta(), delta.finish_reason)
        if include_usage:
            yield reply.usage_chunk(Usage.of(sequence.num_prompt_tokens, completion_tokens, sequence.num_cached))
    except Exception as exc:  # the engine failed mid-stream: the status line is sent, so say it in-band
        yield _sse(_error_body(500, "server_error", f"generation failed: {exc}"))
    finally:
        guard.close()
        await deltas.aclose()
    yield "data: [DONE]\n\n"


async def _prepend(first: Delta, rest: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
    yield first
    if first.finish_reason is None:
        async for delta in rest:
            yield delta


# -- errors -------------------------------------------------------------------------------------------


def _error_body(status: int, code: str, message: str, param: str | None = None) -> OpenAIErrorResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return OpenAIErrorResponse(error=ErrorBody(message=message, type=kind, code=code, param=param))


def _error(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(_error_body(status, code, message, param).model_dump(), status_code=status)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """`messages.0.content: ...` lines from pydantic's errors, and the top-level field of the first one."""
    lines, params = [], []
    for error in exc.errors():
        path = [str(part) for part in error.get("loc", ())[1:] if isinstance(part, int) or "[" not in str(part)]
        lines.append(f"{'.'.join(path) or 'body'}: {error.get('msg', 'invalid')}")
        params.append(path[0] if path else None)
    return "; ".join(lines), next(iter(params), None)


def _install_error_handlers(app: FastAPI) -> None:
    """Every failure answers in OpenAI's error shape, so clients raise their typed exceptions."""

    @app.exception_handler(RequestRefused)
    async def refused(_: HttpRequest, exc: RequestRefused) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.param)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return _error(400, "invalid_request", message, param)

    @app.exception_handler(HTTPException)
    async def http_error(_: HttpRequest, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, "not_found" if exc.status_code == 404 else "http_error", str(exc.detail))

    @app.exception_handler(Exception)
    async def server_error(_: HttpRequest, exc: Exception) -> JSONResponse:
        return _error(500, "server_error", f"internal error: {type(exc).__name__}")
