"""The embedded workers run each stage on its queue's thread pool, prepare on the one QUIRE_PREPARE_QUEUE names."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.config import Settings
from workers import embedded
from workers.embedded import EmbeddedWorkers


@pytest.mark.parametrize(("prepare_queue", "pool"), [("cpu", "quire-cpu"), ("gpu", "quire-gpu")])
def test_prepare_runs_on_the_pool_of_its_queue(prepare_queue: str, pool: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch):
    ran: dict[str, str] = {}
    done = threading.Event()

    def record(ctx: object, stage: str, key: int) -> None:
        ran[stage] = threading.current_thread().name
        done.set()

    monkeypatch.setattr(embedded, "run_stage", record)
    settings = Settings(cache_dir=tmp_path, _env_file=None, prepare_queue=prepare_queue)
    workers = EmbeddedWorkers(settings, recognition=None)
    try:
        workers.send("prepare", 1)
        assert done.wait(10)
    finally:
        workers.close()
    assert ran["prepare"].startswith(pool)
