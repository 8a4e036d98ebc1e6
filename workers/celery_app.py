"""The Celery app of the distributed mode, configured from Settings.

Tasks ack late and are rejected back to the broker when their worker process dies, so a killed worker's task runs
again elsewhere (the stages are idempotent); a worker takes one task at a time per slot, so a long page does not
hold others hostage behind it in a prefetch buffer. No result backend: the database is where results live.
"""

from __future__ import annotations

import redis
from celery import Celery

from pipeline.config import Settings, get_settings
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.graph import queues
from pipeline.jobs.model_status import ModelStatus

# A send waits out a broker restart (about 15 s of attempts) instead of failing at once: an upload during a Redis
# restart is answered 202, and a stage's next stage is sent rather than left to the task's retry or the reaper.
PUBLISH_RETRY = {"max_retries": 10, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 2.0}
# Each GPU worker's model status lives on the broker under this prefix and its worker's name (workers/tasks.py
# publishes it); a key outlives its last refresh by MODEL_STATUS_TTL_S, so a dead worker's verdict goes with it.
MODEL_STATUS_PREFIX = "quire:model-status:"
MODEL_STATUS_TTL_S = 30.0


def task_name(stage: Stage) -> str:
    return f"quire.{stage}"


def create_celery(settings: Settings) -> Celery:
    app = Celery("quire", broker=settings.broker_url or "redis://127.0.0.1:6379/0", include=["workers.tasks"])
    routes = {task_name(stage): {"queue": queue} for stage, queue in queues(settings).items()}
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue="cpu",
        task_routes=routes,
        broker_transport_options={"visibility_timeout": settings.broker_visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        task_publish_retry_policy=PUBLISH_RETRY,
        worker_hijack_root_logger=False,
    )
    return app


class CeleryDispatcher:
    """A Dispatcher that sends each stage as a Celery task to its queue, as the app routes it."""

    def __init__(self, app: Celery, model_status_prefix: str = MODEL_STATUS_PREFIX) -> None:
        self.app = app
        self.queues = {name: route["queue"] for name, route in app.conf.task_routes.items()}
        self.model_status_prefix = model_status_prefix  # where GPU workers publish (another in tests: their own)

    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        name = task_name(stage)
        self.app.send_task(name, args=[key], queue=self.queues[name], countdown=delay_s or None)

    def queue_depths(self) -> dict[str, int]:
        """Messages waiting in each queue's Redis list (Celery's Redis transport keeps a queue as one list)."""
        with self.app.connection_for_read() as connection:
            client = connection.default_channel.client
            return {queue: int(client.llen(queue)) for queue in sorted(set(self.queues.values()))}

    def engine_stats(self) -> dict[str, int] | None:
        return None  # each GPU worker serves its engine's metrics itself (QUIRE_METRICS_PORT)

    def model_statuses(self) -> list[ModelStatus]:
        """What the live GPU workers published about their model, from the broker (short timeouts: /readyz asks)."""
        client = redis.Redis.from_url(self.app.conf.broker_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            keys = sorted(client.scan_iter(match=f"{self.model_status_prefix}*"))
            values = client.mget(keys) if keys else []
        finally:
            client.close()
        return [ModelStatus.from_json(value) for value in values if value is not None]  # None: expired meanwhile


app = create_celery(get_settings())
