"""The service's stage graph, written down once: each stage's queue, the id it runs on, its code, and the stages
it may send next.

    ingest(document) → prepare(page), one per page → recognize(page) when a region needs the model
      → finalize(document) after the last page → deliver(webhook delivery), and deliver again for each retry

With QUIRE_PREPARE_QUEUE=gpu, prepare and recognize share the `gpu` queue, and a prepared page goes on to
recognize in the same thread (the edge is `inline`): no broker round trip, the page image still in memory.

Everything else reads this table: the Celery routes and tasks (workers/celery_app.py, workers/tasks.py), the
embedded workers' pools (workers/embedded.py), `run_stage`, and every send, which goes through
pipeline/jobs/handoff.py and is refused unless it is an edge here. tests/jobs/test_graph.py walks it.

Every stage may run twice (tasks ack late and are re-delivered when a worker dies) and concurrently with its
siblings, so each reads its state from the database first and does only what is still to do, keyed by the id it
runs on: a page that is past a stage is passed on, not redone, and results are upserts keyed by (page, region
index). Work happens outside transactions; each transaction is short, and the next stage is sent only after it has
committed. A document deleted while it is worked on simply ends its remaining tasks: each finds its rows gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.config import Settings
from pipeline.jobs.context import Context
from pipeline.jobs.deliveries import attempt_delivery
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.finalize import finalize_document
from pipeline.jobs.handoff import take_inline
from pipeline.jobs.ingest import ingest_document
from pipeline.jobs.prepare import prepare_page
from pipeline.jobs.recognize import recognize_page

log = logging.getLogger("quire.stages")
Queue = Literal["cpu", "gpu"]


@dataclass(frozen=True)
class Node:
    """One stage's row of the graph: all a dispatcher, a worker and a send need to know about it."""

    queue: Queue  # the workers that run it
    key: str  # the id it runs on, and is idempotent by; its log lines carry it under this name
    run: Callable[[Context, Any], None]
    next: tuple[Stage, ...] = ()  # what it may send: refused otherwise
    inline: tuple[Stage, ...] = ()  # of those, what runs in its thread when both share a queue (handoff.hand_on)
    entry: bool = False  # whether work may begin here from outside the graph (an upload, a cancel's webhook)


START: Stage = "ingest"  # where a document's work begins, and begins again when it is resumed

GRAPH: dict[Stage, Node] = {
    "ingest": Node("cpu", "document_id", ingest_document, next=("prepare", "finalize"), entry=True),
    "prepare": Node("cpu", "page_id", prepare_page, next=("recognize", "finalize"),  # or QUIRE_PREPARE_QUEUE's
                    inline=("recognize",)),
    "recognize": Node("gpu", "page_id", recognize_page, next=("finalize",)),
    "finalize": Node("cpu", "document_id", finalize_document, next=("deliver",)),
    "deliver": Node("cpu", "delivery_id", attempt_delivery, next=("deliver",), entry=True),
}


def queues(settings: Settings) -> dict[Stage, Queue]:
    """Each stage's queue, prepare's on QUIRE_PREPARE_QUEUE: `gpu` lays pages out on the GPU worker, when the CPU
    workers' cores cannot run the layout model as fast as the engine recognises pages."""
    return {stage: settings.prepare_queue if stage == "prepare" else node.queue for stage, node in GRAPH.items()}


def run_stage(ctx: Context, stage: Stage, key: str | int) -> None:
    """Run one stage and log it with its key, its duration, the CPU time its thread spent (the engine's own work
    for a recognize is not in it) and how it ended (the one place both the Celery tasks and the embedded workers go
    through)."""
    node = GRAPH[stage]
    fields: dict[str, Any] = {"stage": stage, node.key: key}
    started, started_cpu = time.perf_counter(), time.thread_time()
    try:
        node.run(ctx, key)
    except Exception as exc:
        take_inline()
        code = getattr(exc, "code", None)  # a typed error (a checkpoint that does not load): its code, no traceback
        coded = {"code": code} if code else {}
        log.warning("%s %s raised: %s", stage, key, exc, exc_info=code is None,
                    extra={**fields, "outcome": "raised", "duration_ms": _since(started), **coded})
        raise
    log.info("%s %s done", stage, key, extra={**fields, "outcome": "done", "duration_ms": _since(started),
                                              "cpu_ms": _since(started_cpu, time.thread_time)})
    for next_stage, next_key in take_inline():
        run_stage(ctx, next_stage, next_key)


def _since(started: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Milliseconds on `clock` since `started`, as the log lines carry them."""
    return round((clock() - started) * 1000.0, 1)
