"""How work moves along the stage graph: every send is an edge of pipeline/jobs/graph.py, or it is refused.

A stage passes its work on with `hand_off`, naming itself: a stage the graph does not list among its next ones is
refused. Along an edge the graph marks `inline`, `hand_on` runs the next stage in the sender's thread instead, right
after the sender's task, where this process takes that stage's work anyway (see `hand_on`). Work that begins outside
any stage (an upload, the reaper, a restart, a cancel's webhook) comes in with `enter`, which takes only the graph's
entry stages. So graph.py is the whole of what may run after what, and tests/jobs/test_graph.py holds every call of
these three in pipeline/jobs to it.

Call either only after the transaction that made the work visible has committed: the stage sent reads it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pipeline.jobs.dispatch import Dispatcher, Stage

if TYPE_CHECKING:
    from pipeline.jobs.context import Context
    from pipeline.jobs.graph import Node

_inline = threading.local()  # the stages hand_on left for this thread to run once the current one returns


class NotInGraph(Exception):
    """A send the stage graph does not allow: a bug in the code that sent it, never bad input."""


def hand_off(dispatcher: Dispatcher, sender: Stage, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
    """Send `stage` on `key` from within the stage `sender`, which the graph must allow to send it."""
    allowed = _node(sender).next
    if stage not in allowed:
        raise NotInGraph(f"{sender} may not send {stage}: the graph lists only {allowed}")
    dispatcher.send(stage, key, delay_s)


def hand_on(ctx: Context, sender: Stage, stage: Stage, key: str | int) -> bool:
    """`hand_off`, except along an edge the graph marks inline when the sender's queue is the stage's: whoever took
    the sender's task from that queue takes the stage's work too, so the stage runs right here, after the sender's
    task returns (`run_stage`), without a broker round trip, and finds what the sender kept in memory for it (a
    page's image, Context.page_images). It fails as its own task would: the sender's task raises and is retried,
    and its re-run passes the work on again. True when the stage will run here."""
    from pipeline.jobs.graph import queues

    node = _node(sender)
    here = queues(ctx.settings)
    if stage in node.inline and here[sender] == here[stage]:
        _inline.__dict__.setdefault("pending", []).append((stage, key))
        return True
    hand_off(ctx.dispatcher, sender, stage, key)
    return False


def take_inline() -> list[tuple[Stage, str | int]]:
    """The stages hand_on left for this thread, now removed from it."""
    pending, _inline.pending = _inline.__dict__.get("pending", []), []
    return pending


def enter(dispatcher: Dispatcher, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
    """Send `stage` on `key` from outside the graph, which must list it as an entry."""
    if not _node(stage).entry:
        raise NotInGraph(f"{stage} is not an entry of the graph: work reaches it only from another stage")
    dispatcher.send(stage, key, delay_s)


def _node(stage: Stage) -> Node:
    # Imported here: the graph imports every stage module, and they import this one.
    from pipeline.jobs.graph import GRAPH

    if stage not in GRAPH:
        raise NotInGraph(f"{stage!r} is not a stage of the graph")
    return GRAPH[stage]
