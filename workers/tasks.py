"""The Celery tasks: one per stage, each a thin call into pipeline.jobs.stages with this process's Context.

A task that raises (the database or blob store unreachable) is retried with backoff; bad input never raises, it
is recorded on the document or page by the stage itself. Every worker runs a reaper thread (workers/reaping.py).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from celery.signals import worker_ready

from pipeline.config import get_settings
from pipeline.db.session import create_db_engine, get_engine
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.stages import run_stage
from pipeline.storage import LocalBlobStore
from workers.celery_app import CeleryDispatcher, app, task_name
from workers.engine_host import EngineHost
from workers.reaping import start_reaper

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


@worker_ready.connect
def _start_reaping(**_: Any) -> None:
    """Reap from the main process with a database engine of its own: prefork children forked later must not inherit
    `context()`'s pooled connections."""
    settings = get_settings()
    start_reaper(Context(settings, create_db_engine(settings.database_url), LocalBlobStore(settings.blob_dir),
                         CeleryDispatcher(app)))
