"""The Celery tasks: one per stage, each a thin call into pipeline.jobs.stages with this process's Context.

A task that raises (the database or blob store unreachable) is retried with backoff; bad input never raises, it
is recorded on the document or page by the stage itself. `quire.reap` runs the reaper on a self-scheduling chain
(workers/reaping.py).
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

import redis
from celery.signals import worker_ready

from pipeline.config import get_settings
from pipeline.db.session import get_engine
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.reaper import reap
from pipeline.jobs.stages import run_stage
from pipeline.storage import LocalBlobStore
from workers.celery_app import CeleryDispatcher, app, task_name
from workers.engine_host import EngineHost
from workers.reaping import take_turn

log = logging.getLogger("quire.tasks")
# Jittered backoff capped at a minute, 20 tries: a task rides out about ten minutes of database outage (a failover,
# a restart) before it gives up and leaves its document to the reaper.
RETRY = {"autoretry_for": (Exception,), "retry_backoff": True, "retry_backoff_max": 60, "max_retries": 20}


@cache
def context() -> Context:
    """The worker process's Context; the engine inside it loads on the first recognize task, so CPU-only workers
    never load it."""
    settings = get_settings()
    return Context(settings, get_engine(settings.database_url), LocalBlobStore(settings.blob_dir),
                   CeleryDispatcher(app), EngineHost(settings))


def _register(stage: Stage) -> Any:
    @app.task(name=task_name(stage), **RETRY)
    def run(key: str | int) -> None:
        run_stage(context(), stage, key)

    return run


ingest = _register("ingest")
prepare = _register("prepare")
recognize = _register("recognize")
finalize = _register("finalize")
deliver = _register("deliver")


@app.task(name="quire.reap", bind=True, **RETRY)
def reap_stalled(task: Any) -> None:
    """Take this interval's turn, send the next run, then reap; a reap that fails waits for the next run."""
    settings = context().settings
    if not take_turn(redis.Redis.from_url(settings.broker_url), task.request.id, settings.reap_interval_s):
        return  # another chain reaps this interval: this one ends
    app.send_task("quire.reap", queue="cpu", countdown=settings.reap_interval_s)
    try:
        reap(context(), settings.reap_after_s)
    except Exception:
        log.warning("reaping failed", exc_info=True)


@worker_ready.connect
def _start_reaping(**_: Any) -> None:
    app.send_task("quire.reap", queue="cpu")
