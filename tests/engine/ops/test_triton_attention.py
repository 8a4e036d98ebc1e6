"""The Triton attention kernels give what per-sequence SDPA gives: paged attention for a whole step (decode rows and
prefill chunks in one launch, through scattered block tables, GQA packed per KV head) and varlen attention for a
step's images (block-diagonal).

Without CUDA, tests/conftest.py turns on Triton's interpreter, which runs the same kernels on CPU tensors. Every
paged batch fills the pool outside the sequences' contexts with NaN, so a kernel that reads past a context (or
follows a padding entry of a block table) fails every comparison, not just a dedicated one."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from pipeline.engine.ops.triton_attention import (
    paged_attention,
    query_block,
    varlen_attention,
    work_items,
)

pytestmark = pytest.mark.slow  # Triton's interpreter

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DECODER = (16, 2, 128)  # the real decoder: 16 query heads on 2 KV heads (group 8), head_dim 128
TINY = (4, 2, 16)  # the tiny test model: group 2, head_dim 16
# (query_len, seq_len): decode rows at several depths, a 13-row chunk after a 20-token cached prefix, a whole prompt.
MIXED = [(1, 1), (1, 17), (13, 33), (1, 40), (21, 21)]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.float16, id="fp16")]


def _randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float64)


@dataclass
class Batch:
    seqs: list[tuple[int, int]]
    q: torch.Tensor
    k_pool: torch.Tensor
    v_pool: torch.Tensor
    tables: torch.Tensor
    query_start: torch.Tensor
    seq_lens: torch.Tensor

    def work(self, padding: tuple[tuple[int, int], ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
        block_q = query_block(self.q.shape[1], self.k_pool.shape[2])
        work_seq, work_row = work_items(np.array([q_len for q_len, _ in self.seqs]), block_q)
        work_seq = np.concatenate([work_seq, [seq for seq, _ in padding]]).astype(np.int32)
        work_row = np.concatenate([work_row, [row for _, row in padding]]).astype(np.int32)
        return torch.from_numpy(work_seq).to(DEVICE), torch.from_numpy(work_row).to(DEVICE)

    def attend(self, work: tuple[torch.Tensor, torch.Tensor] | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
        work_seq, work_row = work if work is not None else self.work()
        return paged_attention(self.q, self.k_pool, self.v_pool, self.tables, self.query_start, self.seq_lens,
                               work_seq, work_row, self.q.shape[-1] ** -0.5, out=out)

    def reference(self) -> torch.Tensor:
        """Per-sequence SDPA in float64 on K/V gathered through the block table, under the offset-causal mask."""
        block_size = self.k_pool.shape[1]
        out = torch.zeros(self.q.shape, dtype=torch.float64)
        starts = self.query_start.tolist()
        for s, (q_len, seq_len) in enumerate(self.seqs):
            if q_len == 0:
                continue
            blocks = self.tables[s, : -(-seq_len // block_size)].long().cpu()
            keys, values = (pool.cpu()[blocks].flatten(0, 1)[:seq_len].double() for pool in (self.k_pool, self.v_pool))
            mask = torch.arange(seq_len)[None, :] <= (seq_len - q_len + torch.arange(q_len))[:, None]
            q = self.q[starts[s]:starts[s + 1]].cpu().double()
            attended = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys.transpose(0, 1)[None],
                                                      values.transpose(0, 1)[None], attn_mask=mask, enable_gqa=True)
            out[starts[s]:starts[s + 1]] = attended[0].transpose(0, 1)
        return out


def _batch(seqs: list[tuple[int, int]], shape: tuple[int, int, int], block_size: int = 16,
           dtype: torch.dtype = torch.float32, seed: int = 0) -> Batch:
    """Blocks in a random order shared out among the sequences, a few left spare; table padding points at a spare
    block, and every pool slot outside a context is NaN."""
    heads, kv_heads, dim = shape
    g = torch.Generator().manual_seed(seed)
    counts = [-(-seq_len // block_size) for _, seq_len in seqs]
    order = torch.randperm(sum(counts) + 2, generator=g)
    k_pool = torch.full((len(order), block_size, kv_heads, dim), float("nan"), dtype=torch.float64)
    v_pool = k_pool.clone()
    tables = torch.full((len(seqs), max(counts) + 1), int(order[-1]), dtype=torch.int32)
    cursor = 0
    for s, (count, (_, seq_len)) in enumerate(zip(counts, seqs, strict=True)):
        tables[s, :count] = order[cursor:cursor + count]
        cursor += count
        slots = torch.arange(seq_len)
        blocks = tables[s, slots // block_size].long()
        k_pool[blocks, slots % block_size] = _randn(g, seq_len, kv_heads, dim)
        v_pool[blocks, slots % block_size] = _randn(g, seq_len, kv_heads, dim)
    query_lens = [q_len for q_len, _ in seqs]
    q = _randn(g, sum(query_lens), heads, dim)
    query_start = torch.tensor(np.concatenate([[0], np.cumsum(query_lens)]), dtype=torch.int32)
    seq_lens = torch.tensor([seq_len for _, seq_len in seqs], dtype=torch.int32)
    q, k_pool, v_pool = (t.to(DEVICE, dtype) for t in (q, k_pool, v_pool))
    return Batch(seqs, q, k_pool, v_pool, tables.to(DEVICE), query_start.to(DEVICE), seq_lens.to(DEVICE))


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    tolerance = TOLERANCE[dtype]
    torch.testing.assert_close(actual.cpu().double(), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [pytest.param(DECODER, id="decoder-16h-2kv-d128"),
                                   pytest.param(TINY, id="tiny-4h-2kv-d16"),
                                   pytest.param((6, 2, 16), id="group-3-pads-the-tile")])
def test_decode_rows_and_prefill_chunks_in_one_launch_match_sdpa_through_scattered_tables(shape, dtype):
    batch = _batch(MIXED, shape, dtype=dtype)
    out = batch.attend()
    assert out.dtype == dtype and out.shape == batch.q.shape
    _assert_close(out, batch.reference(), dtype)


@pytest.mark.parametrize("block_size", [4, 8])
def test_blocks_smaller_than_a_key_tile_are_gathered_across_the_table(block_size):
    batch = _batch(MIXED, TINY, block_size=block_size, seed=1)
    _assert_close(batch.attend(), batch.reference(), torch.float32)


def test_a_program_reads_no_key_past_the_causal_limit_of_its_last_row():
    block_size, length = 4, 21
    batch = _batch([(length, length)], TINY, block_size=block_size, seed=2)
    expected = batch.reference()
    block_q = query_block(*TINY[:2])
    later = torch.arange(block_q, length, device=DEVICE)
    blocks, slots = batch.tables[0].long()[later // block_size], later % block_size
    batch.k_pool[blocks, slots] = batch.v_pool[blocks, slots] = float("nan")
    first_entry = (torch.zeros(1, dtype=torch.int32, device=DEVICE),) * 2
    out = batch.attend(first_entry, out=torch.zeros_like(batch.q))
    _assert_close(out[:block_q], expected[:block_q], torch.float32)
    assert not out[block_q:].any()


def test_padding_work_entries_write_nothing():
    batch = _batch([*MIXED, (0, 0)], TINY, seed=3)
    padding = ((5, 0), (0, 8), (2, 16))  # the empty sequence, past a decode row, past the 13-row chunk
    sentinel = torch.full_like(batch.q, 7.0)
    buffer = sentinel.clone()
    assert batch.attend(tuple(t[-len(padding):] for t in batch.work(padding)), out=buffer) is buffer
    assert torch.equal(buffer, sentinel)
    assert torch.equal(batch.attend(batch.work(padding)), batch.attend())


@pytest.mark.skipif(INTERPRETED or not torch.cuda.is_available(),
                    reason="Triton's interpreter multiplies bf16 bit patterns in tl.dot")
def test_bf16_matches_sdpa_on_the_gpu():
    batch = _batch(MIXED, DECODER, dtype=torch.bfloat16, seed=4)
    _assert_close(batch.attend(), batch.reference(), torch.bfloat16)


def test_work_items_cover_every_query_row_once_in_blocks_of_block_q():
    work_seq, work_row = work_items(np.array([1, 0, 5, 4, 0]), 2)
    assert work_seq.dtype == np.int32 and work_row.dtype == np.int32
    assert list(zip(work_seq.tolist(), work_row.tolist(), strict=True)) == [(0, 0), (2, 0), (2, 2), (2, 4), (3, 0),
                                                                            (3, 2)]


def test_query_block_packs_at_least_sixteen_query_heads_of_one_kv_head_per_tile():
    assert query_block(16, 2) == 2
    assert query_block(4, 2) == 8
    assert query_block(16, 16) == 16
    assert query_block(32, 1) == 1


def _images(lengths: list[int], dtype: torch.dtype, seed: int = 0, heads: int = 16, dim: int = 72):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (_randn(g, sum(lengths), heads, dim).to(DEVICE, dtype) for _ in range(3))
    cu_seqlens = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=DEVICE)
    return q, k, v, cu_seqlens


@pytest.mark.parametrize("dtype", DTYPES)
def test_images_of_different_lengths_in_one_launch_match_sdpa_per_image(dtype):
    lengths = [37, 100, 5]
    q, k, v, cu_seqlens = _images(lengths, dtype)
    out = varlen_attention(q, k, v, cu_seqlens, max(lengths), 72 ** -0.5)
    assert out.dtype == dtype and out.shape == q.shape
    bounds = cu_seqlens.tolist()
    expected = torch.cat([
        F.scaled_dot_product_attention(*(x[a:b].cpu().double().transpose(0, 1) for x in (q, k, v))).transpose(0, 1)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ])
    _assert_close(out, expected, dtype)


def test_images_do_not_attend_to_each_other():
    lengths = [37, 100, 5]
    q, k, v, cu_seqlens = _images(lengths, torch.float32, seed=1)
    before = varlen_attention(q, k, v, cu_seqlens, max(lengths), 72 ** -0.5)
    k[37:137], v[37:137] = k[37:137] * 3 + 1, -v[37:137]
    buffer = torch.empty_like(q)
    after = varlen_attention(q, k, v, cu_seqlens, max(lengths), 72 ** -0.5, out=buffer)
    assert after is buffer
    assert torch.equal(after[:37], before[:37]) and torch.equal(after[137:], before[137:])
    assert not torch.allclose(after[37:137], before[37:137])
