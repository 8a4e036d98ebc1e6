"""The engine's busy time (stats' busy_ms): the time spent in step(), which a benchmark divides by wall time to
tell whether the CPU stages and the queue keep the engine fed. Idle time must not count, and a step's time must."""

from __future__ import annotations

import time

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
from pipeline.engine_metrics import EngineCollector
from tests.reference import random_image


def test_busy_ms_counts_the_steps_and_not_the_idle_time_between_them(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=400)
    assert engine.stats()["busy_ms"] == 0
    started = time.perf_counter()
    engine.generate([Request(images=[random_image(80, 50, seed=i)], max_tokens=8, ignore_eos=True)
                     for i in range(3)])
    wall_ms = (time.perf_counter() - started) * 1000
    busy = engine.stats()["busy_ms"]
    assert 0 < busy <= wall_ms
    time.sleep(0.2)
    assert engine.step() == []  # nothing to run: an empty step costs next to nothing
    assert engine.stats()["busy_ms"] - busy < 50


def test_steps_and_their_sequences_give_the_batch_a_step_ran_on_average(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint, block_size=4, num_blocks=400)
    engine.generate([Request(images=[random_image(80, 50, seed=i)], max_tokens=6, ignore_eos=True)
                     for i in range(3)])
    stats = engine.stats()
    assert stats["steps"] >= 6  # a prefill, then a step per token after the first
    assert stats["step_sequences"] == 3 * stats["steps"]  # the three ran together in every step
    assert engine.step() == [] and engine.stats()["steps"] == stats["steps"]  # an empty step is no step


def test_busy_ms_is_exported_as_a_counter():
    registry = CollectorRegistry()
    registry.register(EngineCollector(lambda: {"busy_ms": 1234}))
    assert "quire_engine_busy_ms_total 1234.0" in generate_latest(registry).decode()
