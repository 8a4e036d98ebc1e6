"""KV cache blocks: a fixed pool of block ids with reference counts and a prefix-hash table.

Sequences own blocks through their block tables; a block returns to a free queue when its last owner lets
go. A full block may carry a hash (see `BlockKey`): it then stays findable while free, until the pool needs
room and evicts it. Free blocks wait in two queues so that every operation is O(1) whatever the pool's
size: never-cached blocks first, then cached ones least recently freed first (vLLM's automatic prefix
caching semantics), so a cached block is evicted only when no blank one is left. The counters are what
tests use to prove that aborts and finishes leak nothing.

Each entry costs host memory (its key and digest and their places in the tables: 600 to 1,100 bytes, traced), so
the free blocks that stay findable are capped (`max_cached_free`). Uncapped, blank blocks going first meant that
every block a request computed kept its entry until every block of the pool had one: the tiny checkpoint's
131,072-block pool on a CPU took 13 blocks a region, about 9 KiB, for its first 10,000 regions, and a GPU's pool
of a million blocks would hold a gigabyte of entries.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockKey:
    """What a cached block holds: compared on every hit, so a hash collision can never serve wrong KV."""

    parent: bytes
    token_ids: tuple[int, ...]
    image_hashes: tuple[str, ...]
    salt: str

    def digest(self) -> bytes:
        h = hashlib.sha256(self.parent)
        h.update(b",".join(str(t).encode() for t in self.token_ids))
        h.update(b"|" + "|".join(self.image_hashes).encode() + b"|" + self.salt.encode())
        return h.digest()


class BlockPool:
    def __init__(self, num_blocks: int, max_cached_free: int | None = None) -> None:
        """`max_cached_free`: free blocks that keep their entry at most (None: every block may), the least recently
        freed forgotten first."""
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.max_cached_free = num_blocks if max_cached_free is None else max_cached_free
        self.ref_counts = [0] * num_blocks
        # A stack popping the lowest ids first: a fresh pool, or a table released whole, comes back consecutive.
        self.uncached = list(range(num_blocks - 1, -1, -1))
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.keys: dict[int, tuple[bytes, BlockKey]] = {}
        self.cached: dict[bytes, int] = {}
        self.evictions = 0

    @property
    def num_free(self) -> int:
        return len(self.uncached) + len(self.lru)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        return len(self.cached)

    def allocate(self, count: int) -> list[int]:
        """`count` blocks, blank ones first; only then the least recently freed cached ones, evicted."""
        if count > self.num_free:
            raise RuntimeError(f"asked for {count} blocks with {self.num_free} free")
        blocks = [self._pop() for _ in range(count)]
        for block in blocks:
            self.ref_counts[block] = 1
        return blocks

    def _pop(self) -> int:
        if self.uncached:
            return self.uncached.pop()
        return self._evict_oldest()

    def _evict_oldest(self) -> int:
        """Take the least recently freed cached block off the LRU and forget its entry."""
        block = self.lru.popitem(last=False)[0]
        digest, _ = self.keys.pop(block)
        del self.cached[digest]
        self.evictions += 1
        return block

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block, last block first: a chain's tail is then the first evicted."""
        for block in reversed(blocks):
            if self.ref_counts[block] <= 0:
                raise RuntimeError(f"block {block} released more often than it was taken")
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                if block in self.keys:
                    self.lru[block] = None
                    if len(self.lru) > self.max_cached_free:
                        self.uncached.append(self._evict_oldest())
                else:
                    self.uncached.append(block)

    def lookup(self, digest: bytes, key: BlockKey) -> int | None:
        block = self.cached.get(digest)
        if block is None or self.keys[block][1] != key:
            return None
        return block

    def acquire(self, block: int) -> None:
        """Take a reference to a cached block found by `lookup`, reviving it from the LRU if it was free."""
        if self.ref_counts[block] == 0:
            del self.lru[block]
        self.ref_counts[block] += 1

    def register(self, block: int, digest: bytes, key: BlockKey) -> None:
        """Make a full block in use findable; the first block to hold a given content keeps the entry."""
        if self.ref_counts[block] == 0:
            raise RuntimeError(f"block {block} is free: only a block in use can be registered")
        if block in self.keys or digest in self.cached:
            return
        self.keys[block] = (digest, key)
        self.cached[digest] = block
