"""What a caller hands the engine and what it gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .processor import TASK_PROMPTS


@dataclass
class Request:
    """One recognition (or chat) request: a task prompt over images, or full chat messages."""

    prompt: str = TASK_PROMPTS["ocr"]
    images: list[Any] = field(default_factory=list)
    messages: list[dict[str, Any]] | None = None
    max_tokens: int = 1024
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool | None = None

    @property
    def skips_special_tokens(self) -> bool:
        """Spotting output is made of special LOC tokens, so it is decoded with them by default."""
        if self.skip_special_tokens is not None:
            return self.skip_special_tokens
        return self.prompt != TASK_PROMPTS["spotting"]


@dataclass
class Output:
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
