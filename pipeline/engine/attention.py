"""Attention backends the decoder calls with its rotated q/k/v.

`ContiguousKV` keeps one sequence's keys and values in growing tensors: the simple exact path used by the
parity tests and as the reference the paged path is compared against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
    """q (T, H, D) attends k/v (past + T, KV, D) causally; GQA by head grouping."""
    t, total = q.shape[0], k.shape[0]
    mask = torch.ones(t, total, dtype=torch.bool, device=q.device).tril(diagonal=past)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, enable_gqa=True
    )
    return out.transpose(0, 1)


class ContiguousKV:
    """KV cache of one sequence, one (K, V) pair of tensors per layer."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        k = self.keys[0]
        return 0 if k is None else k.shape[0]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        past = 0 if self.keys[layer] is None else self.keys[layer].shape[0]
        if past:
            k = torch.cat((self.keys[layer], k))
            v = torch.cat((self.values[layer], v))
        self.keys[layer], self.values[layer] = k, v
        return causal_attention(q, k, v, past)
