"""What a caller hands the engine and what it gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .prompts import TASK_PROMPTS


@dataclass
class Request:
    """One recognition (or chat) request with its sampling parameters.

    Either a task prompt over images (the region-crop case) or full chat `messages`. `temperature` 0 is
    greedy. The repetition guard stops a decode stuck repeating one n-gram, which OCR models do on
    degenerate crops; it is off when `ignore_eos` asks for a fixed length.
    """

    prompt: str = TASK_PROMPTS["ocr"]
    images: list[Any] = field(default_factory=list)
    messages: list[dict[str, Any]] | None = None
    max_tokens: int = 1024
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool | None = None
    repetition_guard: bool | None = None
    cache_salt: str = ""
    request_id: str | None = None

    @property
    def skips_special_tokens(self) -> bool:
        """Spotting output is made of special LOC tokens, so it is decoded with them by default."""
        if self.skip_special_tokens is not None:
            return self.skip_special_tokens
        return self.prompt != TASK_PROMPTS["spotting"]

    @property
    def guards_repetition(self) -> bool:
        return (not self.ignore_eos) if self.repetition_guard is None else self.repetition_guard


@dataclass
class Output:
    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int = 0
    ttft_s: float = 0.0
    tpot_s: float = 0.0

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class Delta:
    """A streamed piece of one request's output; the last one carries its finish_reason."""

    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str | None = None


class EngineError(ValueError):
    """A request the engine refuses; `code` is stable, the message is for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
