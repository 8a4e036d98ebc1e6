"""Continuous batching: which sequences run this step, and how many of their tokens.

Each step first continues running sequences (oldest first: decodes take one token, unfinished prompts a
chunk), then admits waiting ones while `max_num_seqs` and the token budget allow. Chunks end at an image
span's start when they would cut into it; a chunk starting at an image that is larger than the budget is
the one case allowed past it (only as the step's first prefill, so a step's size stays bounded). When
blocks run out the newest running sequence is preempted (recompute), never the one being served.
Nothing is ever pushed back onto the list being drained, so a step always terminates. Which blocks a
sequence holds is the KVCacheManager's business; the scheduler only asks it whether there is room.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .kv_cache_manager import KVCacheManager
from .request import EngineError
from .sequence import Sequence, Status


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 4096
    block_size: int = 16
    prefix_cache_tokens: int | None = None  # freed KV kept findable at most (None: the whole pool)


@dataclass
class Step:
    """The sequences of one model step, each with the number of new tokens it computes."""

    items: list[tuple[Sequence, int]]

    def __bool__(self) -> bool:
        return bool(self.items)


class Scheduler:
    def __init__(self, config: SchedulerConfig, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        self.config = config
        self.kv_cache = KVCacheManager(num_blocks, config.block_size, enable_prefix_caching,
                                       config.prefix_cache_tokens)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    @property
    def capacity_tokens(self) -> int:
        return self.kv_cache.capacity_tokens

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
            hits, start = self.kv_cache.find(seq)
            count = self._chunk(seq, budget, not prefilled, start)
            if count == 0 or not self.kv_cache.admit(seq, hits, count):
                break
            self.waiting.popleft()
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

    def _reserve(self, seq: Sequence, count: int) -> bool:
        """Make room for `seq` by preempting newer running sequences; False if `seq` itself had to go."""
        while not self.kv_cache.grow(seq, count):
            victim = self.running[-1]
            self.preempt(victim)
            if victim is seq:
                return False
        return True

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv_cache.free(seq)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def commit(self, step: Step) -> None:
        """Record that the step's tokens now have KV in the cache."""
        for seq, count in step.items:
            seq.num_computed += count
            self.kv_cache.register(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        if seq.status is Status.FINISHED:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.kv_cache.free(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason
