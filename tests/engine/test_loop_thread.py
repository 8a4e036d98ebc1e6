"""The background loop: however many threads submit at once to a cold engine, one loop thread steps it. Two loops
stepping one scheduler corrupted block tables (IndexError in the prefix cache), which failed every page a GPU
worker with several threads received first after its engine loaded (seen by benchmarks/service_overhead.py)."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.request import Request

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
