"""The CUDA path forced onto the CPU: the Triton backend (under Triton's interpreter) and the padded static buffers
that CUDA graphs replay give transformers' greedy tokens under batching, chunking and preemption."""

from __future__ import annotations

import pytest

from pipeline.engine.cuda_graphs import DecodeGraphs, buckets
from pipeline.engine.engine import Engine
from tests.reference import assert_engine_equals_transformers, random_image, user_turn

pytestmark = pytest.mark.slow  # the CUDA path under Triton's interpreter

pytest.importorskip("triton")


def _requests() -> list[tuple[list[dict], int]]:
    """A text-only prompt, one image and two images, with different max_tokens."""
    return [([{"role": "user", "content": "Summarise the page."}], 7),
            (user_turn("OCR:", [random_image(90, 40, seed=1)]), 5),
            (user_turn("Table Recognition:", [random_image(50, 50, seed=2), random_image(70, 30, seed=3)]), 6)]


def test_the_triton_backend_equals_transformers_under_preemption_and_chunking(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, dtype="float32", attention="triton", block_size=4, num_blocks=16,
                                    max_num_batched_tokens=16, max_num_seqs=3)
    assert engine.runner.backend == "triton"
    assert_engine_equals_transformers(engine, tiny_checkpoint, _requests())
    assert engine.scheduler.preemptions > 0


def test_decode_steps_through_the_graphs_padded_static_buffers_equal_transformers(tiny_checkpoint):
    """Three sequences decode in the 4-row bucket: the spare row writes and reads only the scratch block."""
    engine = Engine.from_pretrained(tiny_checkpoint, dtype="float32", attention="triton", max_num_seqs=4)
    engine.runner.graphs = DecodeGraphs(engine.model, engine.cache, 4)  # never captured
    requests = [([{"role": "user", "content": f"Question {i}: what is on page {i}?"}], 6 + i) for i in range(3)]
    assert_engine_equals_transformers(engine, tiny_checkpoint, requests)
    assert engine.runner.graphs.steps >= 6


def test_graph_buckets_cover_every_batch_size_up_to_max_num_seqs():
    assert buckets(256)[:6] == [1, 2, 4, 8, 16, 32] and buckets(256)[-1] == 256
    assert buckets(3) == [1, 2, 3] and buckets(40) == [1, 2, 4, 8, 16, 32, 40]
    for size in range(1, 257):
        assert any(b >= size for b in buckets(256))
