"""KV block allocation must cost the same whatever the pool's size (an H200 holds about 1,000,000 blocks).

A cycle is one request's life in the pool: a prompt's blocks, one-block grows as it decodes, then the release
of all of them. On a cold pool every free block is blank; on a fully cached pool every free block holds a
prefix-cache entry, so every allocation evicts one (the case that used to scan the whole pool), and the cycle
registers its blocks before releasing them, as the engine does, so the pool stays fully cached.
Run as `python -m benchmarks.allocator`; the last line is one JSON object.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time

from pipeline.engine.block_pool import BlockKey, BlockPool

SIZES = (10_000, 100_000, 1_000_000)
PROMPT_BLOCKS, GROWS = 8, 8
KEY = BlockKey(b"", (), (), "")  # lookups are not timed, so every entry may share one key


class Workload:
    """A pool of `num_blocks`, cold or with every block cached and free, and the request cycle timed on it."""

    def __init__(self, num_blocks: int, cached: bool) -> None:
        self.pool = BlockPool(num_blocks)
        self.cached = cached
        self.digests = (i.to_bytes(8, "little") for i in itertools.count())
        if cached:
            blocks = self.pool.allocate(num_blocks)
            self._register(blocks)
            self.pool.release(blocks)

    def _register(self, blocks: list[int]) -> None:
        for block in blocks:
            self.pool.register(block, next(self.digests), KEY)

    def cycle(self) -> None:
        table = self.pool.allocate(PROMPT_BLOCKS)
        for _ in range(GROWS):
            table += self.pool.allocate(1)
        if self.cached:
            self._register(table)
        self.pool.release(table)

    def us_per_cycle(self, cycles: int = 2000, repeats: int = 7) -> float:
        """Median over `repeats` of the mean cost of a cycle, so a pause elsewhere on the machine does not count."""
        means = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(cycles):
                self.cycle()
            means.append((time.perf_counter() - start) / cycles * 1e6)
        return statistics.median(means)


def main() -> None:
    start = time.perf_counter()
    BlockPool(SIZES[-1])
    figures: dict[str, float] = {"construct_1m_ms": round((time.perf_counter() - start) * 1000, 1)}
    print(f"constructing a pool of {SIZES[-1]:,} blocks: {figures['construct_1m_ms']} ms")
    for state in ("cold", "cached"):
        us = {size: Workload(size, cached=state == "cached").us_per_cycle() for size in SIZES}
        for size in SIZES:
            figures[f"{state}_{size}_us"] = round(us[size], 2)
            print(f"{state:>6} pool of {size:>9,} blocks: {us[size]:7.2f} µs per allocate+free cycle "
                  f"({PROMPT_BLOCKS} blocks + {GROWS} grows)")
        figures[f"{state}_ratio_1m_10k"] = round(us[SIZES[-1]] / us[SIZES[0]], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
