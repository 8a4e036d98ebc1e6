"""The encoder cache: bounded in tokens, least recently used out first, and its bound is its memory."""

from __future__ import annotations

import torch

from pipeline.engine.encoder_cache import EncoderCache

HIDDEN = 8


def _held_bytes(cache: EncoderCache) -> int:
    storages = (entry.untyped_storage() for entry in cache.entries.values())
    return sum({storage.data_ptr(): storage.nbytes() for storage in storages}.values())


def test_an_entry_cut_from_one_tower_call_holds_only_its_own_rows():
    cache = EncoderCache(budget_tokens=64)
    tower_output = torch.randn(4 * 64, HIDDEN)  # four images of 64 tokens encoded together
    for index, rows in enumerate(tower_output.split(64)):
        cache.put(f"image-{index}", rows)
    assert list(cache.entries) == ["image-3"] and cache.tokens == 64
    assert _held_bytes(cache) == 64 * HIDDEN * tower_output.element_size()
    assert torch.equal(cache.get("image-3"), tower_output[192:])


def test_the_least_recently_used_entry_goes_first_unless_a_running_request_needs_it():
    cache = EncoderCache(budget_tokens=20, protected=lambda: {"a"})
    for key in "abc":
        cache.put(key, torch.zeros(8, HIDDEN))
    assert list(cache.entries) == ["a", "c"] and cache.evictions == 1
    assert cache.get("b") is None and cache.get("c") is not None
    assert (cache.hits, cache.misses) == (1, 1)
