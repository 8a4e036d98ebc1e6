"""Attention backends the decoder calls with its rotated q/k/v over the paged KV cache, and the SDPA calls they and
the vision tower share."""

from __future__ import annotations

from types import ModuleType
from typing import Protocol

import torch
import torch.nn.functional as F


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
    """q (T, H, D) attends k/v (past + T, KV, D) causally; GQA by head grouping."""
    t, total = q.shape[0], k.shape[0]
    mask = None if past == 0 else torch.ones(t, total, dtype=torch.bool, device=q.device).tril(diagonal=past)
    return heads_attention(q, k, v, attn_mask=mask, is_causal=past == 0, enable_gqa=True)


def heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options: object) -> torch.Tensor:
    """SDPA over (T, H, D) tensors, given a batch axis: 3-D inputs fall to torch's slow math path on CPU."""
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         **options)
    return out[0].transpose(0, 1)


class KVPools(Protocol):
    """The paged KV cache as the backends read it: per layer, K and V pools of [blocks, block_size, kv_heads,
    head_dim] (the engine's PagedKVCache)."""

    k: torch.Tensor
    v: torch.Tensor


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One query (H, D) over k/v (L, KV, D), heads grouped onto their KV head: no K/V copy per query head."""
    heads, dim = q.shape
    kv_heads = k.shape[1]
    grouped = q.view(kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, k.permute(1, 2, 0)) * dim ** -0.5
    return torch.matmul(scores.softmax(-1), v.transpose(0, 1)).reshape(heads, dim)


class PagedAttention:
    """Attention of one step's flat batch through block tables.

    New K/V are written to their slots first. Decode rows go to the compiled kernel in one call per layer
    when there is one (csrc/paged_decode.cpp); otherwise each gathers only its own blocks (padding every row to
    the longest context costs more than a short loop). Each prefill chunk attends its cached prefix plus
    itself under the causal mask (never unmasked: a later chunk's causality comes from it).
    """

    def __init__(self, cache: KVPools, slots: torch.Tensor, chunks: list[Chunk],
                 decode_kernel: ModuleType | None = None) -> None:
        self.cache, self.slots, self.kernel = cache, slots, decode_kernel
        decodes = [chunk for chunk in chunks if chunk.length == 1] if decode_kernel else []
        self.decodes = DecodeBatch(decodes, slots.device) if decodes else None
        self.looped = [chunk for chunk in chunks if not (self.decodes and chunk.length == 1)]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_pool, v_pool = self.cache.k[layer], self.cache.v[layer]
        kv_shape = (-1, *k_pool.shape[2:])
        k_pool.view(kv_shape).index_copy_(0, self.slots, k)
        v_pool.view(kv_shape).index_copy_(0, self.slots, v)
        out = torch.empty_like(q)
        if self.decodes is not None:
            batch = self.decodes
            out[batch.rows] = self.kernel.paged_decode(q[batch.rows], k_pool, v_pool, batch.tables, batch.lengths,
                                                       q.shape[-1] ** -0.5)
        for chunk in self.looped:
            keys = chunk.read(k_pool)
            values = chunk.read(v_pool)
            if chunk.length == 1:
                out[chunk.start] = decode_attention(q[chunk.start], keys, values)
                continue
            rows = slice(chunk.start, chunk.start + chunk.length)
            out[rows] = causal_attention(q[rows], keys, values, chunk.context - chunk.length)
        return out


class FusedPagedAttention:
    """Attention of one step in one Triton call per layer: every prefill chunk and decode row through the block tables.

    The step's tensors (the engine's step_batch.Uploader) are built once and shared by every layer; nothing here syncs
    with the host, so a decode step runs the same way inside a CUDA graph.
    """

    def __init__(self, cache: KVPools, tensors: dict[str, torch.Tensor]) -> None:
        from .triton_attention import paged_attention

        self.kernel = paged_attention
        self.cache, self.slots = cache, tensors["slots"].long()
        self.meta = tuple(tensors[name] for name in ("block_tables", "query_start", "seq_lens", "work_seq",
                                                     "work_row"))

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_pool, v_pool = self.cache.k[layer], self.cache.v[layer]
        kv_shape = (-1, *k_pool.shape[2:])
        k_pool.view(kv_shape).index_copy_(0, self.slots, k)
        v_pool.view(kv_shape).index_copy_(0, self.slots, v)
        return self.kernel(q, k_pool, v_pool, *self.meta, q.shape[-1] ** -0.5)


class Chunk:
    """One sequence's rows [start, start+length) of the batch, attending `context` tokens of KV."""

    def __init__(self, start: int, length: int, context: int, blocks: list[int], device: torch.device) -> None:
        self.start, self.length, self.context, self.block_ids = start, length, context, blocks
        consecutive = blocks == list(range(blocks[0], blocks[0] + len(blocks)))
        self.run = slice(blocks[0], blocks[0] + len(blocks)) if consecutive else None
        self.blocks = None if consecutive else torch.tensor(blocks, device=device)

    def read(self, pool: torch.Tensor) -> torch.Tensor:
        """The chunk's (context, KV, D) keys or values: a view when its blocks are consecutive."""
        picked = pool[self.run] if self.run is not None else pool[self.blocks]
        return picked.flatten(0, 1)[:self.context]


class DecodeBatch:
    """A step's decode rows as the kernel takes them: row indices, zero-padded block tables, context lengths."""

    def __init__(self, chunks: list[Chunk], device: torch.device) -> None:
        width = max(len(chunk.block_ids) for chunk in chunks)
        self.rows = torch.tensor([chunk.start for chunk in chunks], device=device)
        self.tables = torch.tensor([chunk.block_ids + [0] * (width - len(chunk.block_ids)) for chunk in chunks],
                                   device=device)
        self.lengths = torch.tensor([chunk.context for chunk in chunks], device=device)
