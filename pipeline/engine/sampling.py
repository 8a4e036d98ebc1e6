"""Token choice per row: greedy, or temperature with top-k / top-p and a per-request seeded generator.

Greedy rows (the OCR default) are one argmax over the whole batch; only sampled rows go one by one.
"""

from __future__ import annotations

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
