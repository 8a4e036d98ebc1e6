"""Prefix caching over the block pool: which full blocks of a sequence are already in the cache.

Every image placeholder is the same token id, so a block's key also folds in the content hash of each
image whose span overlaps the block, and the request's cache salt (its tenant): two pages of one size
never share KV, two tenants never share anything. A hit may end inside an image span; the runner then
attaches only the slice of that image's embeddings that falls in the computed window, never the start.
"""

from __future__ import annotations

from .block_pool import BlockKey, BlockPool
from .sequence import Sequence


class PrefixCache:
    def __init__(self, pool: BlockPool, block_size: int) -> None:
        self.pool = pool
        self.block_size = block_size
        self.query_tokens = 0
        self.hit_tokens = 0

    def key(self, seq: Sequence, index: int) -> tuple[bytes, BlockKey]:
        """Key of full block `index` of `seq` (keys are memoised on the sequence: they chain)."""
        while len(seq.block_keys) <= index:
            j = len(seq.block_keys)
            start, end = j * self.block_size, (j + 1) * self.block_size
            parent = seq.block_keys[-1][0] if seq.block_keys else b""
            images = tuple(seq.image_hashes[s.index] for s, _, _ in seq.spans_in(start, end))
            key = BlockKey(parent, tuple(seq.token_ids[start:end]), images, seq.request.cache_salt)
            seq.block_keys.append((key.digest(), key))
        return seq.block_keys[index]

    def find(self, seq: Sequence) -> list[int]:
        """Longest chain of cached full blocks, never covering the last token (one must be computed)."""
        hits = []
        for index in range((seq.num_tokens - 1) // self.block_size):
            block = self.pool.lookup(*self.key(seq, index))
            if block is None:
                break
            hits.append(block)
        return hits

    def record(self, seq: Sequence, hit_blocks: int) -> None:
        self.query_tokens += seq.num_tokens
        self.hit_tokens += hit_blocks * self.block_size

    def register(self, seq: Sequence) -> None:
        """Publish the sequence's blocks that became full since the last call."""
        for index in range(seq.num_registered, seq.num_computed // self.block_size):
            self.pool.register(seq.block_table[index], *self.key(seq, index))
        seq.num_registered = max(seq.num_registered, seq.num_computed // self.block_size)
