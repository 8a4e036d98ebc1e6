"""The slice of the OpenAI chat-completions wire format that `quire engine serve` speaks.

Requests are validated strictly where a wrong value would silently change the output (sampling values,
`n`, message parts) and loosely elsewhere: unknown top-level fields that OpenAI clients send by default
(`user`, `frequency_penalty`, ...) are ignored. vLLM-style extras (`top_k`, `ignore_eos`,
`skip_special_tokens`) ride in the same body, which is where the openai client's `extra_body` puts them.

Unlike OpenAI, an absent `temperature` means 0 (greedy): OCR wants the most likely transcription, and
the engine's output is then reproducible.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

# -- requests -----------------------------------------------------------------------------------------


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImageURL(BaseModel):
    url: str
    detail: str | None = None


class ImageURLPart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextPart | ImageURLPart, Field(discriminator="type")]


class ChatMessage(BaseModel):
    """One turn; `name` and other per-message extras are ignored, tool turns are refused."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, description="0 (the default here) is greedy")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1, description="one choice per request; send n requests for more")
    logprobs: bool | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM-style extras
    top_k: int = Field(default=0, ge=-1, description="0 or -1: no top-k filtering")
    ignore_eos: bool = False
    skip_special_tokens: bool | None = None

    @model_validator(mode="after")
    def _supported(self) -> ChatCompletionRequest:
        if self.logprobs:
            raise ValueError("logprobs are not supported by this server")
        return self

    @property
    def completion_limit(self) -> int | None:
        """`max_completion_tokens` is OpenAI's newer name for `max_tokens` and wins when both are sent."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


# -- responses ----------------------------------------------------------------------------------------


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int = 0) -> Usage:
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                   prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    """`quire_finish_reason` keeps the engine's own reason ("repetition") that OpenAI's field cannot hold."""

    index: int = 0
    message: AssistantMessage
    finish_reason: str
    quire_finish_reason: str


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class ChunkDelta(BaseModel):
    """Only the fields a chunk carries are sent: `{"content": "x"}`, `{"role": ..., "content": ""}` or `{}`."""

    role: Literal["assistant"] | None = None
    content: str | None = None

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: Any) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChunkDelta
    finish_reason: str | None = None
    quire_finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "quire"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    code: str | None = None
    param: str | None = None


class OpenAIErrorResponse(BaseModel):
    error: ErrorBody
