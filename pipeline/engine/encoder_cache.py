"""Vision tower + projector outputs by image content hash, so no image is encoded twice.

The key hashes the preprocessed pixels and the grid, so the same picture at two sizes is two entries.
The cache is bounded in tokens and evicts least-recently-used entries, skipping those a running request
has yet to consume; a preempted request re-prefills from here instead of re-running the tower. An entry is a copy,
never a view: the tower encodes a step's images in one call, and a view of one image's rows would keep the whole
call's output alive for as long as that one entry stays, so the token bound would not bound the memory.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable

import torch

from .model.rope import Grid


def image_hash(pixels: torch.Tensor, grid: Grid) -> str:
    h = hashlib.sha256(repr(tuple(grid)).encode())
    h.update(pixels.contiguous().numpy().tobytes() if pixels.device.type == "cpu" else pixels.cpu().numpy().tobytes())
    return h.hexdigest()


class EncoderCache:
    def __init__(self, budget_tokens: int, protected: Callable[[], set[str]] = set) -> None:
        self.budget_tokens = budget_tokens
        self.protected = protected
        self.entries: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.tokens = 0
        self.hits = self.misses = self.evictions = 0

    def get(self, key: str) -> torch.Tensor | None:
        embeds = self.entries.get(key)
        if embeds is None:
            self.misses += 1
            return None
        self.entries.move_to_end(key)
        self.hits += 1
        return embeds

    def put(self, key: str, embeds: torch.Tensor) -> None:
        if key in self.entries or embeds.shape[0] > self.budget_tokens:
            return
        self.entries[key] = embeds.clone()
        self.tokens += embeds.shape[0]
        if self.tokens > self.budget_tokens:
            self._evict()

    def _evict(self) -> None:
        keep = self.protected()
        for key in list(self.entries):
            if self.tokens <= self.budget_tokens:
                return
            if key in keep:
                continue
            self.tokens -= self.entries.pop(key).shape[0]
            self.evictions += 1
