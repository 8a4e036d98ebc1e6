"""The Celery tasks: one per stage of pipeline/jobs/graph.py, each a thin call into run_stage with this process's
Context.

A task that raises (the database or blob store unreachable) is retried with backoff; bad input never raises, it
is recorded on the document or page by the stage itself. Every worker runs a reaper thread (workers/reaping.py);
a GPU worker also checks its model at start and keeps publishing whether it loads (ModelStatusReporter).
"""

from __future__ import annotations

import logging
import os
import threading
from functools import cache
from typing import Any

import redis
from celery.signals import worker_ready, worker_shutdown

from pipeline.config import get_settings
from pipeline.jobs.context import Context, open_context
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.graph import GRAPH, run_stage
from workers.celery_app import MODEL_STATUS_PREFIX, MODEL_STATUS_TTL_S, CeleryDispatcher, app, task_name
from workers.engine_host import EngineHost
from workers.reaping import start_reaper

log = logging.getLogger(__name__)

# Jittered backoff capped at a minute, 20 tries: a task rides out about ten minutes of database outage (a failover,
# a restart) before it gives up and leaves its document to the reaper.
RETRY = {"autoretry_for": (Exception,), "retry_backoff": True, "retry_backoff_max": 60, "max_retries": 20}


@cache
def engine_host() -> EngineHost:
    """The worker process's one engine host, shared by its task threads and its model status reporter."""
    return EngineHost(get_settings())


@cache
def context() -> Context:
    """The worker process's Context; the engine inside it loads on the first recognize task, so CPU-only workers
    never load it."""
    return open_context(get_settings(), CeleryDispatcher(app), engine_host())


class ModelStatusReporter(threading.Thread):
    """Publishes a GPU worker's model status for the API's /readyz: a key of its own on the broker, with a TTL.

    Why a key on the broker: the API already reaches it (/readyz pings it) and reads every worker's key with one
    SCAN; the key of a worker that dies, even by SIGKILL, expires by itself, so no stale verdict outlives its
    worker and nothing has to clean up after departed ones (a database row would need both a heartbeat column and
    that cleanup; Celery's remote control would broadcast and wait for every worker inside a readiness probe).

    The thread first checks the checkpoint without loading it (EngineHost.check), so a missing or broken model is
    reported before the first upload; then it republishes what the host last found every TTL/3, so a load by a
    region (which may fail, or succeed once the checkpoint is fixed) shows within that time. The worker keeps
    running either way: its recognize tasks fail with the loader's stable code (run_stage logs it), as before.
    """

    def __init__(self, host: EngineHost, client: redis.Redis, key: str, ttl_s: float = MODEL_STATUS_TTL_S) -> None:
        super().__init__(name="quire-model-status", daemon=True)
        self.host, self.client, self.key, self.ttl_s = host, client, key, ttl_s
        self._stopping = threading.Event()

    def run(self) -> None:
        status = self.host.check()
        if status.problem:
            log.warning("%s", status.problem, extra={"code": status.code})
        while not self._stopping.is_set():
            self._publish()
            self._stopping.wait(self.ttl_s / 3)

    def stop(self) -> None:
        """Stop publishing and take the key away: a worker shut down has no model to report."""
        self._stopping.set()
        self.join(timeout=5)
        try:
            self.client.delete(self.key)
        except redis.RedisError:
            pass  # it expires anyway

    def _publish(self) -> None:
        status = self.host.status
        if status is None:
            return
        try:
            self.client.set(self.key, status.to_json(), px=int(self.ttl_s * 1000))
        except redis.RedisError as exc:  # a broker outage: the next refresh tries again
            log.warning("could not publish the model status: %s", exc)


def _register(stage: Stage) -> Any:
    @app.task(name=task_name(stage), **RETRY)
    def run(key: str | int) -> None:
        run_stage(context(), stage, key)

    return run


TASKS = {stage: _register(stage) for stage in GRAPH}


@worker_ready.connect
def _start_reaping(**_: Any) -> None:
    """Reap from the main process with a Context of its own: prefork children forked later must not inherit
    `context()`'s pooled connections."""
    start_reaper(open_context(get_settings(), CeleryDispatcher(app)))


_reporters: list[ModelStatusReporter] = []  # this process's reporter, once its worker consumes the gpu queue


@worker_ready.connect
def _report_model(sender: Any, **_: Any) -> None:
    """Only a worker that consumes the gpu queue hosts the engine, so only it has a model to report."""
    if "gpu" not in {queue.name for queue in sender.task_consumer.queues}:
        return
    client = redis.Redis.from_url(app.conf.broker_url, socket_timeout=5, socket_connect_timeout=5)
    reporter = ModelStatusReporter(engine_host(), client, f"{MODEL_STATUS_PREFIX}{sender.hostname}:{os.getpid()}")
    reporter.start()
    _reporters.append(reporter)


@worker_shutdown.connect
def _stop_reporting(**_: Any) -> None:
    while _reporters:
        _reporters.pop().stop()
