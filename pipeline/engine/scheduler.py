"""Continuous batching: which sequences run this step, and how many of their tokens.

Each step first continues running sequences (oldest first: decodes take one token, unfinished prompts a
chunk), then admits waiting ones while `max_num_seqs` and the token budget allow. Chunks end at an image
span's start when they would cut into it; a chunk starting at an image that is larger than the budget is
the one case allowed past it (only as the step's first prefill, so a step's size stays bounded). When
blocks run out the newest running sequence is preempted (recompute), never the one being served.
Nothing is ever pushed back onto the list being drained, so a step always terminates.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from .block_pool import BlockPool
from .prefix_cache import PrefixCache
from .request import EngineError
from .sequence import Sequence, Status


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 4096
    block_size: int = 16


@dataclass
class Step:
    """The sequences of one model step, each with the number of new tokens it computes."""

    items: list[tuple[Sequence, int]]

    def __bool__(self) -> bool:
        return bool(self.items)


class Scheduler:
    def __init__(self, config: SchedulerConfig, pool: BlockPool, prefix_cache: PrefixCache | None = None) -> None:
        self.config = config
        self.pool = pool
        self.prefix_cache = prefix_cache
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.config.block_size

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        """Refuse a request that could never run, rather than queue it forever."""
        if prompt_tokens + max_tokens > self.capacity_tokens:
            raise EngineError("prompt_too_long", f"prompt of {prompt_tokens} tokens plus max_tokens "
                              f"{max_tokens} can never fit the KV cache of {self.capacity_tokens} tokens")

    def add(self, seq: Sequence) -> None:
        self.check_fits(seq.num_tokens, seq.request.max_tokens)
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> Step:
        budget = self.config.max_num_batched_tokens
        items: list[tuple[Sequence, int]] = []
        prefilled = False
        for seq in list(self.running):
            if seq.status is not Status.RUNNING or budget <= 0:
                continue
            count = self._chunk(seq, budget, not prefilled, seq.num_computed)
            if count == 0 or not self._reserve(seq, count):
                continue
            items.append((seq, count))
            budget -= count
            prefilled |= seq.num_tokens - seq.num_computed > 1
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            hits = self.prefix_cache.find(seq) if self.prefix_cache else []
            start = len(hits) * self.config.block_size
            count = self._chunk(seq, budget, not prefilled, start)
            revived = sum(1 for block in hits if self.pool.ref_counts[block] == 0)
            if count == 0 or self._blocks_needed(seq, count, start, len(hits)) + revived > self.pool.num_free:
                break
            self.waiting.popleft()
            self._admit(seq, hits)
            self._grow(seq, count)
            seq.status = Status.RUNNING
            self.running.append(seq)
            items.append((seq, count))
            budget -= count
            prefilled = True
        return Step(items)

    def _chunk(self, seq: Sequence, budget: int, first_prefill: bool, start: int) -> int:
        end = start + min(seq.num_tokens - start, budget)
        for span in seq.spans:
            if span.start < end < span.end:
                if span.start > start:
                    end = span.start
                elif first_prefill:
                    end = min(seq.num_tokens, start + max(budget, span.end - start))
                else:
                    return 0
                break
        return end - start

    def _blocks_needed(self, seq: Sequence, count: int, start: int | None = None, owned: int | None = None) -> int:
        start = seq.num_computed if start is None else start
        owned = len(seq.block_table) if owned is None else owned
        return max(0, math.ceil((start + count) / self.config.block_size) - owned)

    def _fits(self, seq: Sequence, count: int) -> bool:
        return self._blocks_needed(seq, count) <= self.pool.num_free

    def _grow(self, seq: Sequence, count: int) -> None:
        needed = self._blocks_needed(seq, count)
        if not needed:
            return
        if seq.block_table:
            seq.block_table.extend(self.pool.allocate_after(seq.block_table[-1], needed))
        else:
            final = math.ceil((seq.num_tokens + seq.request.max_tokens) / self.config.block_size)
            seq.block_table.extend(self.pool.allocate_run(needed, final - needed))

    def _admit(self, seq: Sequence, hits: list[int]) -> None:
        """Start a waiting sequence on its cached prefix blocks (if any)."""
        for block in hits:
            self.pool.acquire(block)
        seq.block_table = list(hits)
        seq.num_computed = len(hits) * self.config.block_size
        seq.num_registered = len(hits)
        seq.num_cached = max(seq.num_cached, seq.num_computed)
        if self.prefix_cache:
            self.prefix_cache.record(seq, len(hits))

    def _reserve(self, seq: Sequence, count: int) -> bool:
        """Make room for `seq` by preempting newer running sequences; False if `seq` itself had to go."""
        while not self._fits(seq, count):
            victim = self.running[-1]
            self.preempt(victim)
            if victim is seq:
                return False
        self._grow(seq, count)
        return True

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.release(seq.block_table)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def commit(self, step: Step) -> None:
        """Record that the step's tokens now have KV in the cache."""
        for seq, count in step.items:
            seq.num_computed += count
            if self.prefix_cache:
                self.prefix_cache.register(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        if seq.status is Status.FINISHED:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.pool.release(seq.block_table)
        seq.block_table = []
        seq.status = Status.FINISHED
        seq.finish_reason = reason
