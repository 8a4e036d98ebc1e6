"""Triton attention for the CUDA path: one launch per layer for a whole decoder step, one for a whole vision step.

Both kernels keep the softmax and the accumulator in fp32 and use exp2 with the scale folded into log2(e). The
wrappers only read shapes, strides and python ints, so they can be captured in a CUDA graph; everything that
depends on the batch (which sequence owns which rows, how long each context is) comes from device tensors.

Paged attention (prefill chunks and decode rows together, as vLLM's unified Triton attention): program (w, kv)
takes BLOCK_Q query rows of sequence work_seq[w], from work_row[w], with all `group` query heads that share KV head
kv packed into one BLOCK_M = BLOCK_Q * group tile, so each K/V tile is loaded once for the whole group. Keys are
gathered a TILE of positions at a time through the block table (TILE = max(16, block_size) rounded up to a power of
two), so any block size works and tl.dot always sees dimensions of at least 16. Positions at or past the causal
limit of the program's last row (hence past seq_lens) are neither loaded nor looked up in the table: a decode row
reads ceil(seq_len / block_size) blocks, and table padding may hold anything.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
_MIN_TILE = 16
_VISION_BLOCK_M = 64
_VISION_BLOCK_N = 64


@triton.jit
def _paged_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, query_start_ptr, seq_lens_ptr, work_seq_ptr, work_row_ptr, qk_scale,
    q_stride_t, q_stride_h, q_stride_d, o_stride_t, o_stride_h, o_stride_d,
    k_stride_b, k_stride_s, k_stride_h, k_stride_d, v_stride_b, v_stride_s, v_stride_h, v_stride_d, table_stride,
    HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr, TILE: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
):
    work = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = tl.load(work_seq_ptr + work)
    first_row = tl.load(work_row_ptr + work)
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    context = tl.load(seq_lens_ptr + seq) - q_len
    kv_end = tl.where(first_row < q_len, context + tl.minimum(first_row + BLOCK_Q, q_len), 0)

    offs_m = tl.arange(0, BLOCK_M)
    rows = first_row + offs_m // GROUP
    heads = kv_head * GROUP + offs_m % GROUP
    row_ok = (offs_m < BLOCK_Q * GROUP) & (rows < q_len)
    positions = context + rows
    offs_d = tl.arange(0, BLOCK_D)
    dim_ok = offs_d < HEAD_DIM
    q = tl.load(q_ptr + (q_start + rows)[:, None] * q_stride_t + heads[:, None] * q_stride_h
                + offs_d[None, :] * q_stride_d, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs_n = tl.arange(0, TILE)
    table = tables_ptr + seq.to(tl.int64) * table_stride
    for start in range(0, kv_end, TILE):
        keys = start + offs_n
        key_ok = keys < kv_end
        block = tl.load(table + keys // BLOCK_SIZE, mask=key_ok, other=0).to(tl.int64)
        slot = keys % BLOCK_SIZE
        k = tl.load(k_ptr + block[None, :] * k_stride_b + slot[None, :] * k_stride_s + kv_head * k_stride_h
                    + offs_d[:, None] * k_stride_d, mask=key_ok[None, :] & dim_ok[:, None], other=0.0)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
        s = tl.where(keys[None, :] <= positions[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + block[:, None] * v_stride_b + slot[:, None] * v_stride_s + kv_head * v_stride_h
                    + offs_d[None, :] * v_stride_d, mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    acc = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # idle programs (no keys) store nothing; avoid 0 / 0
    tl.store(out_ptr + (q_start + rows)[:, None] * o_stride_t + heads[:, None] * o_stride_h
             + offs_d[None, :] * o_stride_d, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


@triton.jit
def _varlen_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, cu_seqlens_ptr, qk_scale,
    q_stride_t, q_stride_h, q_stride_d, k_stride_t, k_stride_h, k_stride_d,
    v_stride_t, v_stride_h, v_stride_d, o_stride_t, o_stride_h, o_stride_d,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
):
    m_block = tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)
    start = tl.load(cu_seqlens_ptr + seq)
    length = tl.load(cu_seqlens_ptr + seq + 1) - start
    kv_end = tl.where(m_block * BLOCK_M < length, length, 0)

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < length
    offs_d = tl.arange(0, BLOCK_D)
    dim_ok = offs_d < HEAD_DIM
    q = tl.load(q_ptr + (start + offs_m)[:, None] * q_stride_t + head * q_stride_h + offs_d[None, :] * q_stride_d,
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for key_start in range(0, kv_end, BLOCK_N):
        keys = key_start + offs_n
        key_ok = keys < length
        k = tl.load(k_ptr + (start + keys)[None, :] * k_stride_t + head * k_stride_h + offs_d[:, None] * k_stride_d,
                    mask=key_ok[None, :] & dim_ok[:, None], other=0.0)
        s = tl.where(key_ok[None, :], tl.dot(q, k, input_precision=PRECISION) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + (start + keys)[:, None] * v_stride_t + head * v_stride_h + offs_d[None, :] * v_stride_d,
                    mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    acc = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # idle programs (no keys) store nothing; avoid 0 / 0
    tl.store(out_ptr + (start + offs_m)[:, None] * o_stride_t + head * o_stride_h + offs_d[None, :] * o_stride_d,
             acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


def _precision(dtype: torch.dtype) -> str:
    """fp32 operands get exact products: tl.dot's default TF32 would cost ~1e-3 against an fp32 reference."""
    return "ieee" if dtype == torch.float32 else "tf32"


def query_block(num_heads: int, num_kv_heads: int) -> int:
    """Query rows per program: enough rows that rows x group fills the 16 rows tl.dot needs, and no more, since a
    decode row alone in its program pays for every row of the tile."""
    return max(1, _MIN_TILE // (num_heads // num_kv_heads))


def work_items(query_lens: np.ndarray, block_q: int) -> tuple[np.ndarray, np.ndarray]:
    """(work_seq, work_row): one entry per block_q query rows of each sequence, sequences in order."""
    counts = -(-np.asarray(query_lens, dtype=np.int64) // block_q)
    work_seq = np.repeat(np.arange(len(counts)), counts)
    firsts = np.repeat(np.cumsum(counts) - counts, counts)
    work_row = (np.arange(len(work_seq)) - firsts) * block_q
    return work_seq.astype(np.int32), work_row.astype(np.int32)


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                    query_start: torch.Tensor, seq_lens: torch.Tensor, work_seq: torch.Tensor, work_row: torch.Tensor,
                    scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of a step's packed query rows (T, H, D) over their sequences' paged K/V, whose new rows
    are already in the pools, so that a whole step (decode rows and prefill chunks) is one launch per layer.

    Row i of sequence s sits at position seq_lens[s] - q_len + i. The work list (see work_items) must use
    query_block(H, KV) rows per entry and name real sequences; entries whose first row is at or past their
    sequence's query length (padding up to a captured graph's size) write nothing.
    """
    heads, dim = q.shape[1], q.shape[2]
    block_size, kv_heads = k_pool.shape[1], k_pool.shape[2]
    group = heads // kv_heads
    block_q = query_block(heads, kv_heads)
    tile = triton.next_power_of_2(max(_MIN_TILE, block_size))
    out = torch.empty_like(q) if out is None else out
    _paged_attention_kernel[(work_seq.shape[0], kv_heads)](
        q, k_pool, v_pool, out, block_tables, query_start, seq_lens, work_seq, work_row, scale * _LOG2E,
        *q.stride(), *out.stride(), *k_pool.stride(), *v_pool.stride(), block_tables.stride(0),
        HEAD_DIM=dim, BLOCK_SIZE=block_size, GROUP=group, BLOCK_Q=block_q,
        BLOCK_M=triton.next_power_of_2(max(_MIN_TILE, block_q * group)), TILE=tile,
        BLOCK_D=triton.next_power_of_2(max(_MIN_TILE, dim)), PRECISION=_precision(q.dtype),
    )
    return out


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                     scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Full (non-causal) attention within each packed sequence [cu_seqlens[b], cu_seqlens[b+1]) of (N, H, D) rows
    and none across them, so a step's images share one launch; max_seqlen only sizes the grid."""
    heads, dim = q.shape[1], q.shape[2]
    out = torch.empty_like(q) if out is None else out
    grid = (triton.cdiv(max_seqlen, _VISION_BLOCK_M), cu_seqlens.shape[0] - 1, heads)
    _varlen_attention_kernel[grid](
        q, k, v, out, cu_seqlens, scale * _LOG2E, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        HEAD_DIM=dim, BLOCK_M=_VISION_BLOCK_M, BLOCK_N=_VISION_BLOCK_N,
        BLOCK_D=triton.next_power_of_2(max(_MIN_TILE, dim)), PRECISION=_precision(q.dtype),
    )
    return out
