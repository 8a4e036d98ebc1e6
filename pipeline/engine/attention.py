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


class PagedKVCache:
    """Per-layer K and V pools of shape [num_blocks, block_size, kv_heads, head_dim], allocated once."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (num_layers, num_blocks, block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size

    @staticmethod
    def blocks_for_budget(memory_bytes: int, num_layers: int, block_size: int, kv_heads: int, head_dim: int,
                          dtype: torch.dtype) -> int:
        per_block = 2 * num_layers * block_size * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        return memory_bytes // per_block


class PagedAttention:
    """Attention of one step's flat batch through block tables.

    New K/V are written to their slots first; decode rows (one query each) then run as one padded,
    length-masked SDPA call, and each prefill chunk attends its cached prefix plus itself under the causal
    mask (never unmasked: a later chunk's causality comes from that mask).
    """

    def __init__(self, cache: PagedKVCache, slots: torch.Tensor, decode: DecodeBatch | None,
                 prefills: list[PrefillChunk]) -> None:
        self.cache, self.slots, self.decode, self.prefills = cache, slots, decode, prefills

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_pool, v_pool = self.cache.k[layer], self.cache.v[layer]
        kv_shape = (-1, *k_pool.shape[2:])
        k_pool.view(kv_shape).index_copy_(0, self.slots, k)
        v_pool.view(kv_shape).index_copy_(0, self.slots, v)
        out = torch.empty_like(q)
        if self.decode is not None:
            out[self.decode.rows] = self._decode(q[self.decode.rows], k_pool, v_pool)
        for chunk in self.prefills:
            keys = k_pool[chunk.blocks].flatten(0, 1)[:chunk.context]
            values = v_pool[chunk.blocks].flatten(0, 1)[:chunk.context]
            q_chunk = q[chunk.start:chunk.start + chunk.length]
            out[chunk.start:chunk.start + chunk.length] = causal_attention(
                q_chunk, keys, values, chunk.context - chunk.length)
        return out

    def _decode(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        batch = self.decode
        keys = k_pool[batch.block_tables].flatten(1, 2).transpose(1, 2)  # (B, KV, L, D)
        values = v_pool[batch.block_tables].flatten(1, 2).transpose(1, 2)
        out = F.scaled_dot_product_attention(q[:, :, None, :], keys, values, attn_mask=batch.mask, enable_gqa=True)
        return out[:, :, 0, :]


class DecodeBatch:
    """Decode rows of a step: their flat-batch indices, padded block tables and a context-length mask."""

    def __init__(self, rows: list[int], block_tables: list[list[int]], contexts: list[int], block_size: int,
                 device: torch.device) -> None:
        width = max(len(t) for t in block_tables)
        padded = [t + [0] * (width - len(t)) for t in block_tables]
        self.rows = torch.tensor(rows, device=device)
        self.block_tables = torch.tensor(padded, device=device)
        lengths = torch.tensor(contexts, device=device)
        self.mask = (torch.arange(width * block_size, device=device) < lengths[:, None])[:, None, None, :]


class PrefillChunk:
    """One sequence's prefill chunk: rows [start, start+length) of the batch, `context` tokens of KV."""

    def __init__(self, start: int, length: int, context: int, blocks: list[int], device: torch.device) -> None:
        self.start, self.length, self.context = start, length, context
        self.blocks = torch.tensor(blocks, device=device)
