"""The background loop: submit and stream share it, a refused request fails its stream, and however many threads
submit at once to a cold engine, one loop thread steps it. Two loops stepping one scheduler corrupted block tables
(IndexError in the prefix cache), which failed every page a GPU worker with several threads received first after its
engine loaded (seen by benchmarks/service_overhead.py)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from pipeline.engine.core import EngineConfig
from pipeline.engine.engine import Engine
from pipeline.engine.request import EngineError, Request
from tests.reference import random_image

THREADS, ROUNDS = 16, 10


def loop_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "quire-engine"}


def test_threads_submitting_at_once_to_a_cold_engine_start_one_loop(tiny_checkpoint):
    loaded = Engine.from_pretrained(tiny_checkpoint, num_blocks=256)
    for _ in range(ROUNDS):
        engine = Engine(loaded.model, loaded.processor, EngineConfig(num_blocks=256))
        gate, futures = threading.Barrier(THREADS), []
        before = loop_threads()

        def submit(engine: Engine = engine, gate: threading.Barrier = gate, futures: list[Future] = futures) -> None:
            gate.wait()
            futures.append(engine.submit(Request(prompt="Say something.", max_tokens=2)))

        threads = [threading.Thread(target=submit) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        started = loop_threads() - before
        outputs = [future.result(timeout=60) for future in futures]
        engine.close()
        assert len(started) == 1
        assert len(outputs) == THREADS and all(len(output.token_ids) <= 2 for output in outputs)


def test_submit_and_stream_share_one_background_loop(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint)
    try:
        futures = [engine.submit(Request(prompt="OCR:", images=[random_image(60, 40, seed=i)], max_tokens=5,
                                         ignore_eos=True)) for i in range(4)]
        outputs = [f.result(timeout=60) for f in futures]
        assert all(len(o.token_ids) == 5 for o in outputs)

        async def collect() -> tuple[str, list[int], str | None]:
            text, ids, reason = "", [], None
            async for delta in engine.stream(Request(prompt="OCR:", images=[random_image(60, 40, seed=0)],
                                                     max_tokens=5, ignore_eos=True)):
                text, ids, reason = text + delta.text, ids + delta.token_ids, delta.finish_reason
            return text, ids, reason

        text, ids, reason = asyncio.run(collect())
        assert ids == outputs[0].token_ids and text == outputs[0].text and reason == "length"
    finally:
        engine.close()


def test_stream_of_a_refused_request_raises(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=4)

    async def consume() -> None:
        async for _ in engine.stream(Request(images=[random_image(100, 60)], max_tokens=4)):
            pass

    try:
        with pytest.raises(EngineError, match="prompt_too_long"):
            asyncio.run(consume())
    finally:
        engine.close()
