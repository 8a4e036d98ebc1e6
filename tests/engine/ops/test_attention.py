"""The CPU extension's paged-decode kernel gives what the torch path gives, for any block layout and dtype, and a
step's attention is the same with and without it."""

from __future__ import annotations

import pytest
import torch

from pipeline.engine.kv_cache import PagedKVCache
from pipeline.engine.ops.attention import Chunk, PagedAttention, decode_attention

HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 16, 4


def _pools(blocks: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (blocks, BLOCK, KV_HEADS, DIM)
    return torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)


def _reference(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: list[int], length: int):
    keys = k_pool[table].flatten(0, 1)[:length].float()
    values = v_pool[table].flatten(0, 1)[:length].float()
    return decode_attention(q.float(), keys, values)


def test_scattered_block_tables_of_mixed_lengths_match_the_torch_path(kernel):
    k_pool, v_pool = _pools(64)
    lengths = [1, 3, 4, 5, 17, 40]
    order = torch.randperm(64, generator=torch.Generator().manual_seed(1)).tolist()
    tables, cursor = [], 0
    for length in lengths:
        count = -(-length // BLOCK)
        tables.append(order[cursor:cursor + count] + [0] * (10 - count))
        cursor += count
    q = torch.randn(len(lengths), HEADS, DIM)
    out = kernel.paged_decode(q, k_pool, v_pool, torch.tensor(tables), torch.tensor(lengths), DIM ** -0.5)
    for row, length in enumerate(lengths):
        expected = _reference(q[row], k_pool, v_pool, tables[row][:-(-length // BLOCK)], length)
        torch.testing.assert_close(out[row], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_pools_accumulate_in_fp32(kernel, dtype):
    k_pool, v_pool = _pools(16, dtype=dtype)
    q = torch.randn(2, HEADS, DIM).to(dtype)
    tables, lengths = [[3, 7, 1, 0], [5, 2, 9, 11]], [10, 16]
    out = kernel.paged_decode(q, k_pool, v_pool, torch.tensor(tables), torch.tensor(lengths), DIM ** -0.5)
    assert out.dtype == dtype
    for row, length in enumerate(lengths):
        expected = _reference(q[row], k_pool, v_pool, tables[row], length)
        torch.testing.assert_close(out[row].float(), expected, atol=2e-2, rtol=2e-2)


def test_a_mixed_step_is_the_same_with_and_without_the_kernel(kernel):
    """Decode rows go to the kernel, prefill chunks stay on SDPA; the step's output does not change."""
    cache = PagedKVCache(1, 32, BLOCK, KV_HEADS, DIM, torch.float32, "cpu")
    cache.k.copy_(torch.randn_like(cache.k))
    cache.v.copy_(torch.randn_like(cache.v))
    chunks = [Chunk(0, 1, 9, [4, 9, 2], torch.device("cpu")), Chunk(1, 5, 7, [10, 11], torch.device("cpu")),
              Chunk(6, 1, 13, [20, 21, 22, 23], torch.device("cpu"))]
    slots = torch.tensor([2 * BLOCK + 0] + [10 * BLOCK + i for i in range(2, 4)] + [11 * BLOCK + i for i in range(3)]
                         + [23 * BLOCK + 0])
    q, k, v = torch.randn(7, HEADS, DIM), torch.randn(7, KV_HEADS, DIM), torch.randn(7, KV_HEADS, DIM)
    fused = PagedAttention(cache, slots, chunks, kernel)(0, q, k, v)
    looped = PagedAttention(cache, slots, chunks)(0, q, k, v)
    torch.testing.assert_close(fused, looped, atol=1e-5, rtol=1e-5)
