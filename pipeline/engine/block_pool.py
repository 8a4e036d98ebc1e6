"""KV cache blocks: a fixed pool of block ids with reference counts and a prefix-hash table.

Sequences own blocks through their block tables; a block returns to the free queue when its last owner
lets go. A full block may carry a hash (see `block_hash`): it then stays findable while free, until the
pool needs room and evicts it, least recently freed first (vLLM's automatic prefix caching semantics).
The counters are what tests use to prove that aborts and finishes leak nothing.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
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
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.keys: dict[int, tuple[bytes, BlockKey]] = {}
        self.cached: dict[bytes, int] = {}
        self.evictions = 0
        self.cursor = 0

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        return len(self.cached)

    def allocate(self, count: int) -> list[int]:
        if count > self.num_free:
            raise RuntimeError(f"asked for {count} blocks with {self.num_free} free")
        blocks = [self.free_queue.popitem(last=False)[0] for _ in range(count)]
        for block in blocks:
            self._forget(block)
            self.ref_counts[block] = 1
        return blocks

    def allocate_run(self, count: int, headroom: int = 0) -> list[int]:
        """`count` consecutive blocks followed by `headroom` free ones, if such an uncached run exists.

        Consecutive blocks let attention read a sequence's KV as a view instead of gathering it; the
        headroom (a placement preference, not a reservation) leaves the sequence room to grow in place.
        Falls back to least-recently-freed order, so cached blocks are never evicted out of turn.
        """
        start = self._find_run(count + headroom) if count else None
        if start is None:
            return self.allocate(count)
        self.cursor = (start + count + headroom) % self.num_blocks
        return self._take(range(start, start + count))

    def allocate_after(self, last: int, count: int) -> list[int]:
        """`count` blocks, right after block `last` when those are free and uncached."""
        wanted = range(last + 1, last + 1 + count)
        if wanted.stop <= self.num_blocks and all(self._is_spare(b) for b in wanted):
            return self._take(wanted)
        return self.allocate_run(count)

    def _is_spare(self, block: int) -> bool:
        return self.ref_counts[block] == 0 and block not in self.keys

    def _find_run(self, length: int) -> int | None:
        """Next fit from the cursor, so a new run does not land in the headroom of the previous one."""
        for blocks in (range(self.cursor, self.num_blocks), range(self.cursor)):
            run = 0
            for block in blocks:
                run = run + 1 if self._is_spare(block) else 0
                if run == length:
                    return block - length + 1
        return None

    def _take(self, blocks: range) -> list[int]:
        for block in blocks:
            del self.free_queue[block]
            self.ref_counts[block] = 1
        return list(blocks)

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block; a block whose last owner left joins the free queue's tail."""
        for block in reversed(blocks):
            if self.ref_counts[block] <= 0:
                raise RuntimeError(f"block {block} released more often than it was taken")
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_queue[block] = None

    def lookup(self, digest: bytes, key: BlockKey) -> int | None:
        block = self.cached.get(digest)
        if block is None or self.keys[block][1] != key:
            return None
        return block

    def acquire(self, block: int) -> None:
        """Take a reference to a cached block found by `lookup`, reviving it from the free queue if needed."""
        if self.ref_counts[block] == 0:
            del self.free_queue[block]
        self.ref_counts[block] += 1

    def register(self, block: int, digest: bytes, key: BlockKey) -> None:
        """Make a full block findable; the first block to hold a given content keeps the entry."""
        if block in self.keys or digest in self.cached:
            return
        self.keys[block] = (digest, key)
        self.cached[digest] = block

    def _forget(self, block: int) -> None:
        entry = self.keys.pop(block, None)
        if entry is not None:
            del self.cached[entry[0]]
            self.evictions += 1
