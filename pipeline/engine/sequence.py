"""One request's state inside the engine: its tokens, images, KV block table and progress."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

from .detokenizer import IncrementalDetokenizer
from .processor import Prompt
from .request import Request
from .stopping import StopRules


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True)
class ImageSpan:
    """Token range [start, end) of the placeholders of the request's image number `index`."""

    start: int
    end: int
    index: int


class Sequence:
    def __init__(self, request_id: str, request: Request, prompt: Prompt, positions: torch.Tensor, rope_delta: int,
                 spans: list[ImageSpan], image_pixels: list[torch.Tensor], image_hashes: list[str],
                 detokenizer: IncrementalDetokenizer, stops: StopRules) -> None:
        self.request_id = request_id
        self.request = request
        self.prompt = prompt
        self.token_ids = list(prompt.input_ids)
        self.num_prompt_tokens = len(self.token_ids)
        self.prompt_positions = positions.numpy()
        self.rope_delta = rope_delta
        self.spans = spans
        self.image_hashes = image_hashes
        self.image_pixels = image_pixels
        self.detokenizer = detokenizer
        self.stops = stops
        self.image_embeds: dict[int, torch.Tensor] = {}
        self.block_keys: list[tuple[bytes, object]] = []
        self.num_registered = 0
        self.block_table: list[int] = []
        self.num_computed = 0
        self.num_cached = 0
        self.status = Status.WAITING
        self.finish_reason: str | None = None
        self.arrival = time.perf_counter()
        self.first_token_at = 0.0
        self.finished_at = 0.0
        self.generator = _generator(request.seed)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    def positions(self, start: int, end: int) -> np.ndarray:
        """(3, end-start) M-RoPE positions: the prompt's table, then index + rope_delta for generated tokens."""
        tail_start = max(start, self.num_prompt_tokens)
        tail = np.arange(tail_start + self.rope_delta, end + self.rope_delta)
        if start >= self.num_prompt_tokens:
            return np.broadcast_to(tail, (3, len(tail)))
        head = self.prompt_positions[:, start:min(end, self.num_prompt_tokens)]
        return head if end <= tail_start else np.concatenate((head, np.broadcast_to(tail, (3, len(tail)))), axis=1)

    def spans_in(self, start: int, end: int) -> list[tuple[ImageSpan, int, int]]:
        """Images whose placeholders overlap [start, end), with the overlapping token range of each."""
        return [(s, max(s.start, start), min(s.end, end)) for s in self.spans if s.start < end and start < s.end]

    def append(self, token: int) -> None:
        self.token_ids.append(token)
        self.first_token_at = self.first_token_at or time.perf_counter()

    def reset_for_recompute(self) -> None:
        """Preempted: its KV is dropped; prompt and generated tokens are prefilled again later."""
        self.block_table = []
        self.num_computed = 0
        self.num_registered = 0
        self.image_embeds = {}
        self.status = Status.WAITING


def _generator(seed: int | None) -> torch.Generator | None:
    return None if seed is None else torch.Generator().manual_seed(seed)
