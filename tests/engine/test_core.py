"""The engine's core: mixed batches equal transformers token for token; aborts and finishes leak no blocks; a core is
built without parallel torch work in the building thread."""

from __future__ import annotations

import pytest
import torch

from pipeline.engine import core
from pipeline.engine.engine import Engine
from pipeline.engine.ops import prepack
from pipeline.engine.request import EngineError, Request
from tests.reference import assert_engine_equals_transformers, random_image, user_turn


def _mixed_requests() -> list[tuple[list[dict], int]]:
    """Text-only, one-image and two-image prompts of different sizes, with different max_tokens."""
    out = []
    for i in range(12):
        if i % 3 == 0:
            messages = [{"role": "user", "content": f"Summarise paragraph {i}."}]
        elif i % 3 == 1:
            messages = user_turn("OCR:", [random_image(60 + 25 * i, 40 + 6 * i, seed=i)])
        else:
            images = [random_image(50, 50, seed=i), random_image(90, 40, seed=50 + i)]
            messages = user_turn("Table Recognition:", images)
        out.append((messages, 6 + 3 * i))
    return out


@pytest.fixture(scope="module")
def tight_engine(tiny_checkpoint) -> Engine:
    """block_size 4, a KV budget that forces preemption and a token budget that forces chunked prefill."""
    return Engine.from_pretrained(tiny_checkpoint, dtype="float32", block_size=4, num_blocks=48,
                                  max_num_batched_tokens=32, max_num_seqs=8)


@pytest.mark.slow
def test_mixed_batch_under_preemption_and_chunking_equals_transformers_alone(tight_engine, tiny_checkpoint):
    assert_engine_equals_transformers(tight_engine, tiny_checkpoint, _mixed_requests())
    assert tight_engine.scheduler.preemptions > 0


def test_a_request_that_can_never_fit_is_refused_clearly(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=4)
    with pytest.raises(EngineError, match="prompt_too_long"):
        engine.add_request(Request(images=[random_image(100, 60)], max_tokens=4))
    assert not engine.has_unfinished()


def test_abort_frees_every_block(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=400)
    ids = [engine.add_request(Request(images=[random_image(80, 50, seed=i)], max_tokens=50, ignore_eos=True))
           for i in range(3)]
    engine.step()
    engine.step()
    assert engine.pool.num_used > 0
    for request_id in ids:
        engine.abort(request_id)
    assert engine.pool.num_free == engine.pool.num_blocks and not engine.has_unfinished()


@pytest.mark.slow
def test_no_block_leaks_after_1000_mixed_requests(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=300, max_num_seqs=16,
                                    max_num_batched_tokens=512)
    image = random_image(40, 30, seed=7)
    aborted = 0
    for batch in range(20):
        ids = [engine.add_request(Request(
            messages=[{"role": "user", "content": f"q{batch}-{i}"}] if i % 2 else None,
            images=[image] if i % 2 == 0 else [], max_tokens=1 + (i % 4), ignore_eos=True)) for i in range(50)]
        engine.step()
        engine.abort(ids[batch % 50])
        aborted += 1
        while engine.has_unfinished():
            engine.step()
    assert engine.pool.num_free == engine.pool.num_blocks
    assert all(count == 0 for count in engine.pool.ref_counts) and aborted == 20


def test_seeded_sampling_is_reproducible(tiny_checkpoint):
    """The prefix cache is off: a repeat would otherwise prefill only its last token, and in bf16 that shorter GEMM
    rounds the logits differently; the tiny model's are nearly flat, so the same draw then picks another token."""
    engine = Engine.from_pretrained(tiny_checkpoint, prefix_cache_tokens=0)

    def sampled(seed: int) -> list[int]:
        return engine.generate([Request(prompt="OCR:", images=[random_image(70, 50)], max_tokens=10,
                                        temperature=1.0, top_k=50, top_p=0.9, seed=seed, ignore_eos=True)])[0].token_ids

    assert sampled(1) == sampled(1)
    assert sampled(1) != sampled(2)


def test_an_engine_is_built_without_parallel_torch_work_in_the_building_thread(tiny_checkpoint, monkeypatch):
    """The loop thread's OpenMP pool must be the process's only one: a second, left by the thread that loaded the
    model, made every step 35-55 % slower (serial_torch's docstring)."""
    seen = []
    real = prepack.prepack_linears
    monkeypatch.setattr(core, "prepack_linears", lambda *args: seen.append(torch.get_num_threads())
                        or real(*args))
    threads = torch.get_num_threads()
    Engine.from_pretrained(tiny_checkpoint).close()
    assert seen == [1] and torch.get_num_threads() == threads
