"""The service's stage graph, written down once, and the one runner that walks it: each stage's queue, the id it
runs on, its code, and the stages it may send next.

    ingest(document) → prepare(page), one per page → recognize(page) when a region needs the model
      → finalize(document) after the last page → deliver(webhook delivery), and deliver again for each retry

A stage does its work, commits it, and returns what it produced as data: the sends (pipeline/jobs/dispatch.py's
`Send`) for the stages after it. `run_stage` runs it, refuses any send that is not an edge here (a bug, never bad
input), and makes the rest: with QUIRE_PREPARE_QUEUE=gpu prepare and recognize share the `gpu` queue, and a
prepared page goes on to recognize in the same thread (the edge is `inline`), with no broker round trip and the
page image still in memory; every other send goes to the dispatcher. Work that begins outside any stage (an upload,
the reaper, a restart, a cancel's webhook) comes in with `enter`, at an entry of the graph only.

Everything else reads this table too: the Celery routes and tasks (workers/celery_app.py, workers/tasks.py) and
the embedded workers' pools (workers/embedded.py). tests/jobs/test_graph.py walks it.

Every stage may run twice (tasks ack late and are re-delivered when a worker dies) and concurrently with its
siblings, so each reads its state from the database first and does only what is still to do, keyed by the id it
runs on: a page that is past a stage is passed on, not redone, and results are upserts keyed by (page, region
index). Work happens outside transactions; each transaction is short, and a stage returns its sends only after the
transaction that made their work visible has committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.config import Settings
from pipeline.jobs.context import Context
from pipeline.jobs.dispatch import Dispatcher, Send, Stage
from pipeline.jobs.stages.deliver import attempt_delivery
from pipeline.jobs.stages.finalize import finalize_document
from pipeline.jobs.stages.ingest import ingest_document
from pipeline.jobs.stages.prepare import prepare_page
from pipeline.jobs.stages.recognize import recognize_page

log = logging.getLogger("quire.stages")
Queue = Literal["cpu", "gpu"]


@dataclass(frozen=True)
class Node:
    """One stage's row of the graph: all a dispatcher, a worker and the runner need to know about it."""

    queue: Queue  # the workers that run it
    key: str  # the id it runs on, and is idempotent by; its log lines carry it under this name
    run: Callable[[Context, Any], list[Send]]
    next: tuple[Stage, ...] = ()  # what it may send: refused otherwise
    inline: tuple[Stage, ...] = ()  # of those, what runs in its thread when both share a queue
    entry: bool = False  # whether work may begin here from outside the graph (an upload, a cancel's webhook)


class NotInGraph(Exception):
    """A send the stage graph does not allow: a bug in the code that sent it, never bad input."""


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
    """Run one stage, log it with its key, its duration, the CPU time its thread spent (the engine's own work for a
    recognize is not in it) and how it ended, then make its sends (the one place both the Celery tasks and the
    embedded workers go through). A stage that raises sends nothing: its task is retried, and its re-run passes the
    work on again."""
    node = _node(stage)
    fields: dict[str, Any] = {"stage": stage, node.key: key}
    started, started_cpu = time.perf_counter(), time.thread_time()
    try:
        sends = node.run(ctx, key)
    except Exception as exc:
        code = getattr(exc, "code", None)  # a typed error (a checkpoint that does not load): its code, no traceback
        coded = {"code": code} if code else {}
        log.warning("%s %s raised: %s", stage, key, exc, exc_info=code is None,
                    extra={**fields, "outcome": "raised", "duration_ms": _since(started), **coded})
        raise
    log.info("%s %s done", stage, key, extra={**fields, "outcome": "done", "duration_ms": _since(started),
                                              "cpu_ms": _since(started_cpu, time.thread_time)})
    for send in _checked(stage, sends):
        if _runs_here(ctx.settings, stage, send.stage):
            if send.image is not None:
                ctx.page_images.put(*send.image)
            run_stage(ctx, send.stage, send.key)
        else:
            ctx.dispatcher.send(send.stage, send.key, send.delay_s)


def enter(dispatcher: Dispatcher, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
    """Send `stage` on `key` from outside the graph, which must list it as an entry. Call it only after the
    transaction that made the work visible has committed: the stage sent reads it."""
    if not _node(stage).entry:
        raise NotInGraph(f"{stage} is not an entry of the graph: work reaches it only from another stage")
    dispatcher.send(stage, key, delay_s)


def _checked(sender: Stage, sends: list[Send]) -> list[Send]:
    """The sends, every one of them an edge of the graph; none is made when one is not."""
    allowed = GRAPH[sender].next
    for send in sends:
        if send.stage not in allowed:
            raise NotInGraph(f"{sender} may not send {send.stage}: the graph lists only {allowed}")
    return sends


def _runs_here(settings: Settings, sender: Stage, stage: Stage) -> bool:
    """Whether `stage` runs in the sender's thread: along an inline edge, when both share a queue, whoever took the
    sender's task from that queue takes the stage's work too."""
    here = queues(settings)
    return stage in GRAPH[sender].inline and here[sender] == here[stage]


def _node(stage: Stage) -> Node:
    if stage not in GRAPH:
        raise NotInGraph(f"{stage!r} is not a stage of the graph")
    return GRAPH[stage]


def _since(started: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Milliseconds on `clock` since `started`, as the log lines carry them."""
    return round((clock() - started) * 1000.0, 1)
