"""The paged KV cache's tensors: every layer's K and V blocks, allocated once when the engine starts.

Which block holds what is kv_cache_manager.py's and block_pool.py's bookkeeping; the attention backends
(ops/attention.py) write and read these tensors through the step's slot mapping and block tables.
"""

from __future__ import annotations

import torch


class PagedKVCache:
    """Per-layer K and V pools of shape [num_blocks + 1, block_size, kv_heads, head_dim], allocated once.

    The extra block (`scratch_block`) is never handed out: the padding rows of a CUDA graph's fixed-size batch write
    their K/V there and read it back, so they never touch a sequence's blocks.
    """

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (num_layers, num_blocks + 1, block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.scratch_block = num_blocks

    @staticmethod
    def blocks_for_budget(memory_bytes: int, num_layers: int, block_size: int, kv_heads: int, head_dim: int,
                          dtype: torch.dtype) -> int:
        """How many blocks `memory_bytes` holds: each is K and V of every layer."""
        per_block = 2 * num_layers * block_size * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        return memory_bytes // per_block
