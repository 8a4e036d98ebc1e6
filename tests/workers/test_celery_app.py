"""Where the Celery app sends each stage: recognize to the GPU workers, prepare where QUIRE_PREPARE_QUEUE says."""

from __future__ import annotations

import pytest

from pipeline.config import Settings
from workers.celery_app import CeleryDispatcher, create_celery


def sent_queues(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Task name → the queue the dispatcher sends it to (nothing reaches a broker)."""
    app = create_celery(settings)
    sent: dict[str, str] = {}
    monkeypatch.setattr(app, "send_task", lambda name, args, queue, countdown: sent.setdefault(name, queue))
    dispatcher = CeleryDispatcher(app)
    for stage in ("ingest", "prepare", "recognize", "finalize", "deliver"):
        dispatcher.send(stage, 1)
    return sent


def test_prepare_goes_to_the_cpu_workers_by_default(monkeypatch: pytest.MonkeyPatch):
    assert sent_queues(Settings(_env_file=None), monkeypatch) == {
        "quire.ingest": "cpu", "quire.prepare": "cpu", "quire.recognize": "gpu", "quire.finalize": "cpu",
        "quire.deliver": "cpu"}


def test_prepare_queue_gpu_sends_render_and_layout_to_the_gpu_workers(monkeypatch: pytest.MonkeyPatch):
    settings = Settings(_env_file=None, prepare_queue="gpu")
    assert sent_queues(settings, monkeypatch)["quire.prepare"] == "gpu"
    assert create_celery(settings).conf.task_routes["quire.prepare"] == {"queue": "gpu"}
