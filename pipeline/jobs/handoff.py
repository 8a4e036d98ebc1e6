"""How work moves along the stage graph: every send is an edge of pipeline/jobs/graph.py, or it is refused.

A stage passes its work on with `hand_off`, naming itself: a stage the graph does not list among its next ones is
refused. Work that begins outside any stage (an upload, the reaper, a restart, a cancel's webhook) comes in with
`enter`, which takes only the graph's entry stages. So graph.py is the whole of what may run after what, and
tests/jobs/test_graph.py holds every call of these two in pipeline/jobs to it.

Call either only after the transaction that made the work visible has committed: the stage sent reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.jobs.dispatch import Dispatcher, Stage

if TYPE_CHECKING:
    from pipeline.jobs.graph import Node


class NotInGraph(Exception):
    """A send the stage graph does not allow: a bug in the code that sent it, never bad input."""


def hand_off(dispatcher: Dispatcher, sender: Stage, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
    """Send `stage` on `key` from within the stage `sender`, which the graph must allow to send it."""
    allowed = _node(sender).next
    if stage not in allowed:
        raise NotInGraph(f"{sender} may not send {stage}: the graph lists only {allowed}")
    dispatcher.send(stage, key, delay_s)


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
