"""KV cache blocks: a fixed pool of block ids with reference counts.

Sequences own blocks through their block tables; a block returns to the free list when its last owner
lets go. The counters are what tests use to prove that aborts and finishes leak nothing.
"""

from __future__ import annotations

from collections import deque


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_ids: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def allocate(self, count: int) -> list[int]:
        if count > self.num_free:
            raise RuntimeError(f"asked for {count} blocks with {self.num_free} free")
        blocks = [self.free_ids.popleft() for _ in range(count)]
        for block in blocks:
            self.ref_counts[block] = 1
        return blocks

    def release(self, blocks: list[int]) -> None:
        for block in blocks:
            if self.ref_counts[block] <= 0:
                raise RuntimeError(f"block {block} released more often than it was taken")
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_ids.append(block)
