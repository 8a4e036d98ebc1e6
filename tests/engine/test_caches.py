"""Prefix cache and encoder cache: reuse that never leaks one image's, or one tenant's, KV into another."""

from __future__ import annotations

import pytest

from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.request import Request
from tests.reference import random_image

CROPS = [random_image(120, 80, seed=s) for s in (11, 12, 13)]  # three different crops of one size


def _ocr(image, **kw) -> Request:
    return Request(prompt="OCR:", images=[image], max_tokens=12, ignore_eos=True, **kw)


@pytest.fixture(scope="module")
def cache_off_answers(tiny_checkpoint) -> list[list[int]]:
    engine = Engine.from_pretrained(tiny_checkpoint, enable_prefix_caching=False, encoder_cache_tokens=0)
    return [engine.generate([_ocr(crop)])[0].token_ids for crop in CROPS]


def test_same_size_crops_never_share_kv_and_repeats_hit_the_cache(tiny_checkpoint, cache_off_answers):
    engine = Engine.from_pretrained(tiny_checkpoint)
    for round_ in range(2):
        for crop, expected in zip(CROPS, cache_off_answers, strict=True):
            out = engine.generate([_ocr(crop)])[0]
            assert out.token_ids == expected
            assert (out.cached_tokens > 0) == (round_ == 1)
    assert cache_off_answers[0] != cache_off_answers[1] != cache_off_answers[2]


def test_tenants_never_share_blocks_but_a_tenant_reuses_its_own(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint)
    first = engine.generate([_ocr(CROPS[0], cache_salt="tenant-a")])[0]
    other = engine.generate([_ocr(CROPS[0], cache_salt="tenant-b")])[0]
    again = engine.generate([_ocr(CROPS[0], cache_salt="tenant-a")])[0]
    assert first.cached_tokens == 0 and other.cached_tokens == 0 and again.cached_tokens > 0
    by_salt: dict[str, set[int]] = {}
    for block, (_, key) in engine.pool.keys.items():
        by_salt.setdefault(key.salt, set()).add(block)
    assert by_salt["tenant-a"] and by_salt["tenant-b"] and not by_salt["tenant-a"] & by_salt["tenant-b"]
    assert first.token_ids == other.token_ids == again.token_ids


def test_a_hit_that_ends_inside_an_image_span_gives_the_cache_off_tokens(tiny_checkpoint, cache_off_answers):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=64, encoder_cache_tokens=0)
    engine.generate([_ocr(CROPS[0])])
    seq = engine.prepare(_ocr(CROPS[0]))
    span = seq.spans[0]
    keep = span.start // 4 + 2  # the cached chain will end 2 blocks into the image
    assert span.start < keep * 4 < span.end
    chain = len(engine.pool.cached)
    untouched = engine.pool.num_free - chain
    evictor = engine.pool.allocate(untouched + chain - keep)  # LRU: the tail of the chain goes first
    engine.pool.release(evictor)
    out = engine.generate([_ocr(CROPS[0])])[0]
    assert out.cached_tokens == keep * 4
    assert out.token_ids == cache_off_answers[0]


def test_under_preemption_the_tower_runs_once_per_distinct_image(tiny_checkpoint, cache_off_answers):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=36, max_num_batched_tokens=32,
                                    max_num_seqs=6, enable_prefix_caching=False)
    requests = [_ocr(CROPS[i % 3]) for i in range(9)]
    outputs = engine.generate(requests)
    stats = engine.stats()
    assert stats["preemptions"] > 0 and stats["encoder_cache_hits"] > 0
    assert stats["vision_tower_images"] == 3
    for i, out in enumerate(outputs):
        assert out.token_ids == cache_off_answers[i % 3]


def _text(words: str) -> Request:
    return Request(messages=[{"role": "user", "content": words}], max_tokens=1, ignore_eos=True)


def test_cached_blocks_are_evicted_least_recently_used_first(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=40)
    pool, kv_cache = engine.pool, engine.scheduler.kv_cache
    older, newer = _text("invoice total amount due " * 3), _text("methods results discussion " * 3)
    engine.generate([older])
    engine.generate([newer])
    hits_older = len(kv_cache.find(engine.prepare(older))[0])
    hits_newer = len(kv_cache.find(engine.prepare(newer))[0])
    assert hits_older > 1 and hits_newer > 1
    blank = pool.num_free - len(pool.lru)
    pool.release(pool.allocate(blank + 1))  # blank blocks go first, then the least recently freed cached one only
    assert pool.evictions == 1
    assert len(kv_cache.find(engine.prepare(older))[0]) == hits_older - 1
    assert len(kv_cache.find(engine.prepare(newer))[0]) == hits_newer
    assert engine.generate([older])[0].cached_tokens == (hits_older - 1) * 4
    assert min(pool.ref_counts) == 0 and pool.num_free == pool.num_blocks


def test_however_many_requests_pass_the_prefix_cache_keeps_its_budget_of_finished_ones_findable(tiny_checkpoint):
    """Each entry costs host memory (600 to 1,100 bytes), and every full block a request computed used to keep one
    until the whole pool held entries: with the 131,072 blocks bf16 gives this checkpoint by default, a GPU worker
    grew for ten thousand requests. By default 262,144 tokens (16,384 blocks) of finished requests stay findable,
    the most recent ones; a budget of 64 blocks in a pool five times that size shows the rule."""
    assert EngineConfig().prefix_cache_tokens == 262_144
    budget = 64
    engine = Engine.from_pretrained(tiny_checkpoint, num_blocks=5 * budget, prefix_cache_tokens=budget * 16)
    requests = [_text(f"page {i} " + " ".join(f"w{i}x{j}" for j in range(40))) for i in range(12)]
    engine.generate(requests)
    assert sum(-(-len(engine.prepare(r).token_ids) // engine.config.block_size) for r in requests) > budget * 1.1
    assert len(engine.pool.keys) == engine.pool.num_cached == budget
    assert engine.generate([requests[-1]])[0].cached_tokens > 0
    assert engine.pool.num_free == engine.pool.num_blocks
