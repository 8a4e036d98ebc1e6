"""Each sequence's KV blocks: admission on a cached prefix, growth, publication of full blocks, freeing.

Every image placeholder is the same token id, so a block's key also folds in the content hash of each
image whose span overlaps the block, and the request's cache salt (its tenant): two pages of one size
never share KV, two tenants never share anything. A hit may end inside an image span; the runner then
attaches only the slice of that image's embeddings that falls in the computed window, never the start.
"""

from __future__ import annotations

import math

from .block_pool import BlockKey, BlockPool
from .sequence import Sequence


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True,
                 cached_tokens: int | None = None) -> None:
        """`cached_tokens`: tokens of finished requests' KV kept findable at most (None: the whole pool)."""
        self.pool = BlockPool(num_blocks, None if cached_tokens is None else cached_tokens // block_size)
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.query_tokens = 0
        self.hit_tokens = 0

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.block_size

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

    def find(self, seq: Sequence) -> tuple[list[int], int]:
        """Longest chain of cached full blocks and the tokens it covers; never the last token (one must be
        computed to sample from). Takes no reference: `admit` does, if the sequence gets in."""
        hits: list[int] = []
        if self.enable_caching:
            for index in range((seq.num_tokens - 1) // self.block_size):
                block = self.pool.lookup(*self.key(seq, index))
                if block is None:
                    break
                hits.append(block)
        return hits, len(hits) * self.block_size

    def admit(self, seq: Sequence, hits: list[int], count: int) -> bool:
        """Start a waiting sequence on its cached prefix `hits` with room for `count` more tokens; False,
        changing nothing, when the pool is short (reviving a free cached block uses up a free block too)."""
        revived = sum(1 for block in hits if self.pool.ref_counts[block] == 0)
        needed = self._blocks_for(len(hits) * self.block_size + count) - len(hits)
        if needed + revived > self.pool.num_free:
            return False
        for block in hits:
            self.pool.acquire(block)
        seq.block_table = list(hits)
        seq.num_computed = len(hits) * self.block_size
        seq.num_registered = len(hits)
        seq.num_cached = max(seq.num_cached, seq.num_computed)
        if self.enable_caching:
            self.query_tokens += seq.num_tokens
            self.hit_tokens += seq.num_computed
        seq.block_table.extend(self.pool.allocate(needed))
        return True

    def grow(self, seq: Sequence, count: int) -> bool:
        """Room for `count` more tokens of a running sequence; False, changing nothing, when the pool is short."""
        needed = self._blocks_for(seq.num_computed + count) - len(seq.block_table)
        if needed > self.pool.num_free:
            return False
        if needed > 0:
            seq.block_table.extend(self.pool.allocate(needed))
        return True

    def register(self, seq: Sequence) -> None:
        """Publish the sequence's blocks that became full since the last call (after its step is committed)."""
        if not self.enable_caching:
            return
        full = seq.num_computed // self.block_size
        for index in range(seq.num_registered, full):
            self.pool.register(seq.block_table[index], *self.key(seq, index))
        seq.num_registered = max(seq.num_registered, full)

    def free(self, seq: Sequence) -> None:
        """Give back the sequence's blocks (finished or preempted); its full ones stay findable until evicted."""
        self.pool.release(seq.block_table)
        seq.block_table = []

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)
