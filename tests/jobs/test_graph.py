"""The stage graph is the whole truth about the service's stages: every stage is reachable from the start, every
send in the code is one of its edges (and every edge is sent somewhere), each stage runs on a queue some worker
consumes, under a Celery task of its own, keyed by the id its code takes; and a send off the graph is refused."""

from __future__ import annotations

import ast
import importlib
import inspect
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import pytest

import api
import pipeline.jobs
from pipeline.cli import build_parser
from pipeline.config import Settings
from pipeline.jobs.dispatch import Stage
from pipeline.jobs.graph import GRAPH, START, queues, run_stage
from pipeline.jobs.handoff import NotInGraph, enter, hand_off, hand_on, take_inline
from workers.celery_app import create_celery, task_name
from workers.embedded import EmbeddedWorkers
from workers.tasks import TASKS

JOBS = Path(pipeline.jobs.__file__).parent
IDS = ("document_id", "page_id", "delivery_id")


@dataclass(frozen=True)
class Send:
    module: str
    helper: str  # hand_off, hand_on or enter
    sender: Stage | None  # None for enter: from outside the graph
    stage: Stage


@dataclass
class Recorder:
    sent: list[tuple[str, str | int, float]] = field(default_factory=list)

    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        self.sent.append((stage, key, delay_s))


def modules(package: Path, name: str) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        dotted = ".".join((name, *parts)).removesuffix(".__init__")
        yield dotted, ast.parse(path.read_text(), str(path))


def calls(tree: ast.Module, name: str) -> Iterator[ast.Call]:
    """Calls of the function `name` or of a method called `name`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called == name:
                yield node


def value(module: str, argument: ast.expr) -> Any:
    """A literal, or a module-level name of `module` (start.py enters graph.START)."""
    if isinstance(argument, ast.Constant):
        return argument.value
    assert isinstance(argument, ast.Name), f"{module}: a stage given by {ast.unparse(argument)}, not by name"
    return vars(importlib.import_module(module))[argument.id]


def sends_in_code() -> list[Send]:
    found = []
    for module, tree in modules(JOBS, "pipeline.jobs"):
        if module == "pipeline.jobs.handoff":  # where the helpers are defined: hand_on sends with hand_off
            continue
        for helper in ("hand_off", "hand_on"):
            for call in calls(tree, helper):
                found.append(Send(module, helper, value(module, call.args[1]), value(module, call.args[2])))
        for call in calls(tree, "enter"):
            found.append(Send(module, "enter", None, value(module, call.args[1])))
    return found


def edges() -> set[tuple[Stage, Stage]]:
    return {(stage, successor) for stage, node in GRAPH.items() for successor in node.next}


def inline_edges() -> set[tuple[Stage, Stage]]:
    return {(stage, successor) for stage, node in GRAPH.items() for successor in node.inline}


def test_an_inline_edge_is_an_edge_and_only_prepare_runs_its_successor_in_its_thread():
    assert inline_edges() <= edges()
    assert inline_edges() == {("prepare", "recognize")}


def test_the_graph_names_every_stage_the_dispatchers_take_and_no_other():
    assert set(GRAPH) == set(get_args(Stage))


def test_every_stage_is_reachable_from_the_start():
    reached, frontier = {START}, [START]
    while frontier:
        for successor in GRAPH[frontier.pop()].next:
            if successor not in reached:
                reached.add(successor)
                frontier.append(successor)
    assert reached == set(GRAPH)
    assert GRAPH[START].entry


def test_every_send_in_the_stages_is_an_edge_of_the_graph_sent_by_the_stage_whose_module_it_is():
    sends = sends_in_code()
    for send in sends:
        assert send.stage in GRAPH, send
        if send.helper != "enter":
            assert (send.sender, send.stage) in edges(), send
            assert send.module == GRAPH[send.sender].run.__module__, f"{send}: a stage hands off only its own work"
        else:
            assert GRAPH[send.stage].entry, send


def test_every_edge_and_every_entry_of_the_graph_is_sent_somewhere():
    sends = sends_in_code()
    assert {(send.sender, send.stage) for send in sends if send.helper != "enter"} == edges()
    assert {(send.sender, send.stage) for send in sends if send.helper == "hand_on"} >= inline_edges()
    assert {send.stage for send in sends if send.helper == "enter"} == {stage for stage, node in GRAPH.items()
                                                                         if node.entry}


def test_nothing_but_the_handoff_module_calls_a_dispatcher_and_no_route_names_a_stage():
    senders = [module for package, name in ((JOBS, "pipeline.jobs"), (Path(api.__file__).parent, "api"))
               for module, tree in modules(package, name) if any(calls(tree, "send"))]
    assert senders == ["pipeline.jobs.handoff"]
    routes = Path(api.__file__).parent / "routes"
    for module, tree in modules(routes, "api.routes"):
        named = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)} & set(GRAPH)
        assert not named, f"{module} names the stages {named}"


def test_every_stage_is_keyed_by_the_id_its_code_takes():
    for stage, node in GRAPH.items():
        assert node.key in IDS, stage
        assert list(inspect.signature(node.run).parameters)[1] == node.key, stage


@pytest.mark.parametrize("prepare_queue", ["cpu", "gpu"])
def test_every_stage_runs_on_a_queue_the_workers_consume_under_a_task_of_its_own(prepare_queue: str,
                                                                                 tmp_path: Path):
    settings = Settings(cache_dir=tmp_path, _env_file=None, prepare_queue=prepare_queue)
    consumed = set(build_parser().parse_args(["worker"]).queues.split(","))  # `quire worker` by default
    assert set(queues(settings).values()) <= consumed
    routes = create_celery(settings).conf.task_routes
    assert routes == {task_name(stage): {"queue": queue} for stage, queue in queues(settings).items()}
    assert set(TASKS) == set(GRAPH) and all(TASKS[stage].name == task_name(stage) for stage in GRAPH)
    workers = EmbeddedWorkers(settings, recognition=None)
    try:
        assert set(queues(settings).values()) <= set(workers.queue_depths())
    finally:
        workers.close()


def test_a_stage_may_hand_off_only_to_its_successors():
    dispatcher = Recorder()
    hand_off(dispatcher, "prepare", "recognize", 7)
    hand_off(dispatcher, "deliver", "deliver", "d1", delay_s=2.0)
    for sender, stage in (("recognize", "prepare"), ("ingest", "recognize"), ("finalize", "ingest")):
        with pytest.raises(NotInGraph, match=f"{sender} may not send {stage}"):
            hand_off(dispatcher, sender, stage, 7)
    with pytest.raises(NotInGraph, match="ingest may not send render"):
        hand_off(dispatcher, "ingest", "render", 7)  # type: ignore[arg-type]
    with pytest.raises(NotInGraph, match="'render' is not a stage"):
        hand_off(dispatcher, "render", "prepare", 7)  # type: ignore[arg-type]
    assert dispatcher.sent == [("recognize", 7, 0.0), ("deliver", "d1", 2.0)]


@pytest.mark.parametrize(("prepare_queue", "inline"), [("cpu", False), ("gpu", True)])
def test_hand_on_runs_an_inline_successor_in_this_thread_only_when_both_stages_share_a_queue(
        prepare_queue: str, inline: bool, tmp_path: Path):
    ctx = SimpleNamespace(settings=Settings(cache_dir=tmp_path, _env_file=None, prepare_queue=prepare_queue),
                          dispatcher=Recorder())
    assert hand_on(ctx, "prepare", "recognize", 7) is inline
    assert hand_on(ctx, "prepare", "finalize", "doc") is False
    assert take_inline() == ([("recognize", 7)] if inline else []) and take_inline() == []
    assert ctx.dispatcher.sent == ([] if inline else [("recognize", 7, 0.0)]) + [("finalize", "doc", 0.0)]
    with pytest.raises(NotInGraph, match="recognize may not send prepare"):
        hand_on(ctx, "recognize", "prepare", 7)


def test_run_stage_runs_what_its_stage_left_inline_after_logging_it_and_drops_it_when_the_stage_raises(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path):
    ctx = SimpleNamespace(settings=Settings(cache_dir=tmp_path, _env_file=None, prepare_queue="gpu"),
                          dispatcher=Recorder())
    ran = []

    def prepare(ctx, page_id):
        ran.append(("prepare", page_id))
        hand_on(ctx, "prepare", "recognize", page_id)
        if page_id == 2:
            raise RuntimeError("the database went away")

    monkeypatch.setitem(GRAPH, "prepare", replace(GRAPH["prepare"], run=prepare))
    monkeypatch.setitem(GRAPH, "recognize", replace(GRAPH["recognize"], run=lambda ctx, page_id: ran.append(
        ("recognize", page_id))))
    caplog.set_level("INFO", logger="quire.stages")
    run_stage(ctx, "prepare", 1)
    with pytest.raises(RuntimeError):
        run_stage(ctx, "prepare", 2)
    assert ran == [("prepare", 1), ("recognize", 1), ("prepare", 2)] and take_inline() == []
    logged = [(record.stage, record.outcome) for record in caplog.records if record.name == "quire.stages"]
    assert logged == [("prepare", "done"), ("recognize", "done"), ("prepare", "raised")]
    assert ctx.dispatcher.sent == []


def test_work_enters_the_graph_only_at_an_entry():
    dispatcher = Recorder()
    enter(dispatcher, START, "doc")
    for stage in ("prepare", "recognize", "finalize"):
        with pytest.raises(NotInGraph, match="not an entry"):
            enter(dispatcher, stage, 7)
    assert dispatcher.sent == [(START, "doc", 0.0)]


def test_a_done_line_carries_the_stage_s_wall_time_and_its_thread_s_cpu_time(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path):
    def busy_then_idle(ctx, page_id):
        spin_until = time.thread_time() + 0.05
        while time.thread_time() < spin_until:
            pass
        time.sleep(0.1)  # waiting (as a recognize waits on the engine) costs the thread no CPU

    monkeypatch.setitem(GRAPH, "recognize", replace(GRAPH["recognize"], run=busy_then_idle))
    caplog.set_level("INFO", logger="quire.stages")
    run_stage(SimpleNamespace(settings=Settings(cache_dir=tmp_path, _env_file=None)), "recognize", 1)
    (done,) = [record for record in caplog.records if record.name == "quire.stages"]
    assert done.duration_ms >= 150 and 50 <= done.cpu_ms < 120
