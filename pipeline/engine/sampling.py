"""Token choice per row: greedy, or temperature with top-k / top-p and a per-request seeded generator.

Greedy rows (the OCR default) are one argmax over the whole batch; only sampled rows go one by one.
"""

from __future__ import annotations

import torch

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


def is_runaway(tokens: list[int], max_ngram: int = 16) -> bool:
    """True when the tail of `tokens` is one n-gram (n ≤ max_ngram) repeated back to back."""
    for n in range(1, max_ngram + 1):
        span = n * repeats_needed(n)
        if len(tokens) < span:
            continue
        tail = tokens[-span:]
        if tail == tail[:n] * (span // n):
            return True
    return False
