"""Token choice per row: greedy, or temperature with top-k / top-p and a per-request seeded generator.

Greedy rows (the OCR default) are one argmax over the whole batch; only sampled rows go one by one.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .sequence import Sequence


def sample(logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
    tokens = logits.argmax(dim=-1).tolist()
    for row, seq in enumerate(seqs):
        request = seq.request
        if request.temperature > 0:
            probs = filtered_probs(logits[row], request.temperature, request.top_k, request.top_p)
            tokens[row] = int(torch.multinomial(probs.cpu(), 1, generator=seq.generator))
    return tokens


def filtered_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    scaled = logits.float() / temperature
    if 0 < top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = scaled.softmax(-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p
        probs = probs.scatter(0, order, sorted_probs.masked_fill(outside, 0.0))
        probs = probs / probs.sum()
    return probs


def repeats_needed(ngram: int) -> int:
    """How often an n-gram must repeat back to back to count as a runaway loop (≥ 32 tokens, ≥ 4 times)."""
    return max(4, -(-32 // ngram))


class RunawayGuard:
    """Whether the tail of the tokens so far is one n-gram (n ≤ max_ngram) repeated back to back, kept up to date
    token by token, in O(max_ngram) a token rather than O(length).

    For each n it counts how many of the latest tokens equal the token n places before them: the tail is an n-gram
    repeated r times back to back exactly when that count reaches n·(r − 1).
    """

    def __init__(self, max_ngram: int = 16) -> None:
        self.recent: deque[int] = deque(maxlen=max_ngram)
        self.matches = [0] * max_ngram
        self.needed = [n * (repeats_needed(n) - 1) for n in range(1, max_ngram + 1)]

    def add(self, token: int) -> bool:
        """Record the next token; True when the tail has become a runaway loop."""
        recent, runaway = self.recent, False
        for i in range(len(self.matches)):
            self.matches[i] = self.matches[i] + 1 if len(recent) > i and recent[-1 - i] == token else 0
            runaway |= self.matches[i] >= self.needed[i]
        recent.append(token)
        return runaway
