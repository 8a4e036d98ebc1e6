"""OpenAI-compatible HTTP server over one resident engine (`quire engine serve`).

Any OpenAI client can send region crops as data-URL image parts; requests from all connections share
the engine's continuous batches. The server never fetches remote image URLs. Bad input is a 400 with an
OpenAI-style error body, never a 500; a client that disconnects mid-stream has its request aborted.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from .engine import Engine
from .processor import ImageError
from .request import EngineError, Output, Request

FINISH_REASONS = {"stop": "stop", "length": "length", "repetition": "stop", "abort": "stop"}


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool | None = None


class BadRequest(ValueError):
    """Input the server refuses before it reaches the engine."""


def _image_bytes(part: dict[str, Any]) -> bytes:
    url = (part.get("image_url") or {}).get("url", "") if isinstance(part.get("image_url"), dict) \
        else str(part.get("image_url", ""))
    if not url.startswith("data:") or ";base64," not in url:
        raise BadRequest("image_url must be a base64 data URL; this server does not fetch remote images")
    try:
        return base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    except ValueError as exc:
        raise BadRequest(f"image_url is not valid base64 ({exc})") from exc


def _message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return {"role": message.get("role", "user"), "content": content or ""}
    parts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            parts.append({"type": "image", "image": _image_bytes(part)})
        else:
            raise BadRequest(f"unsupported content part type {kind!r}")
    return {"role": message.get("role", "user"), "content": parts}


def to_engine_request(body: ChatRequest) -> Request:
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    return Request(messages=[_message(m) for m in body.messages],
                   max_tokens=body.max_completion_tokens or body.max_tokens or 1024,
                   temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, seed=body.seed, stop=stop,
                   ignore_eos=body.ignore_eos, skip_special_tokens=body.skip_special_tokens,
                   request_id=f"chatcmpl-{uuid.uuid4().hex}")


def _error(status: int, message: str, code: str) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


def _usage(out: Output) -> dict[str, int]:
    return {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.generated_tokens,
            "total_tokens": out.prompt_tokens + out.generated_tokens}


def create_app(engine: Engine, model_name: str) -> FastAPI:
    app = FastAPI(title="Quire engine (OpenAI-compatible)")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "quire"}]}

    @app.post("/v1/chat/completions")
    async def chat(raw: HttpRequest):
        try:
            body = ChatRequest.model_validate(await raw.json())
            request = to_engine_request(body)
            sequence = await asyncio.to_thread(engine.prepare, request)
        except json.JSONDecodeError as exc:
            return _error(400, f"body is not JSON ({exc})", "invalid_json")
        except (ImageError, EngineError) as exc:
            return _error(400, str(exc), exc.code)
        except ValueError as exc:  # pydantic's ValidationError and BadRequest
            return _error(400, str(exc), "invalid_request")
        created = int(time.time())
        if body.stream:
            return StreamingResponse(_sse(engine, sequence, model_name, created, raw, body),
                                     media_type="text/event-stream")
        try:
            out = await asyncio.wrap_future(engine.submit(sequence))
        except EngineError as exc:
            return _error(400, str(exc), exc.code)
        return {"id": out.request_id, "object": "chat.completion", "created": created, "model": model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": out.text},
                             "finish_reason": FINISH_REASONS.get(out.finish_reason, "stop"),
                             "quire_finish_reason": out.finish_reason}],
                "usage": _usage(out)}

    return app


async def _sse(engine: Engine, sequence, model_name: str, created: int, raw: HttpRequest,
               body: ChatRequest) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        payload = {"id": sequence.request_id, "object": "chat.completion.chunk", "created": created,
                   "model": model_name, "choices": [choice], **extra}
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    completion = 0
    try:
        async for delta in engine.stream(sequence):
            completion += len(delta.token_ids)
            if delta.finish_reason is None:
                if delta.text:
                    yield chunk({"content": delta.text})
                continue
            yield chunk({}, FINISH_REASONS.get(delta.finish_reason, "stop"))
    except EngineError as exc:
        yield f"data: {json.dumps({'error': {'message': str(exc), 'code': exc.code}})}\n\n"
    if (body.stream_options or {}).get("include_usage"):
        usage = {"prompt_tokens": sequence.num_prompt_tokens, "completion_tokens": completion,
                 "total_tokens": sequence.num_prompt_tokens + completion}
        payload = {"id": sequence.request_id, "object": "chat.completion.chunk", "created": created,
                   "model": model_name, "choices": [], "usage": usage}
        yield f"data: {json.dumps(payload)}\n\n"
    yield "data: [DONE]\n\n"
