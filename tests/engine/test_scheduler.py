"""The scheduler always drains: every request finishes in a bounded number of steps, whatever arrives when."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
from tests.reference import random_image

IMAGES = [random_image(40, 30, seed=1), random_image(30, 60, seed=2)]
KINDS = st.sampled_from(["text", "one-image", "two-images"])
ARRIVALS = st.lists(st.tuples(KINDS, st.integers(0, 3), st.integers(1, 6)), min_size=1, max_size=10)


@pytest.fixture(scope="module")
def small_engine(tiny_checkpoint) -> Engine:
    """A KV cache of 130 blocks × 4 tokens: one two-image request fits, a few do not fit together."""
    return Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=130, max_num_batched_tokens=48,
                                  max_num_seqs=4)


def _request(kind: str, max_tokens: int) -> Request:
    if kind == "text":
        return Request(messages=[{"role": "user", "content": "hello"}], max_tokens=max_tokens, ignore_eos=True)
    images = IMAGES[:1] if kind == "one-image" else IMAGES
    return Request(images=images, max_tokens=max_tokens, ignore_eos=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrivals=ARRIVALS)
def test_every_request_finishes_within_a_bounded_number_of_steps(small_engine, arrivals):
    engine = small_engine
    pending = list(arrivals)
    ids, done, work = [], set(), 0
    steps, idle_allowance = 0, 4 * len(arrivals)
    while pending or engine.has_unfinished():
        while pending and pending[0][1] == 0:
            kind, _, max_tokens = pending.pop(0)
            seq = engine.prepare(_request(kind, max_tokens))
            work += seq.num_tokens + max_tokens
            ids.append(engine.add_request(seq))
        pending = [(k, max(0, delay - 1), n) for k, delay, n in pending]
        done.update(out.request_id for out in engine.step())
        steps += 1
        assert steps <= 4 * work + idle_allowance, f"no drain after {steps} steps ({engine.stats()})"
    assert done == set(ids)
    assert engine.pool.num_free == engine.pool.num_blocks
