"""The stage graph is the whole truth about the service's stages: every stage is reachable from the start, runs on
a queue some worker consumes, under a Celery task of its own, keyed by the id its code takes; and its one runner
makes a stage's sends only along the graph's edges, after the stage returned, in the stage's thread only along an
inline edge within one queue."""

from __future__ import annotations

import ast
import inspect
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest

import api
import pipeline.jobs
from pipeline.cli import build_parser
from pipeline.config import Settings
from pipeline.jobs.context import PageImages
from pipeline.jobs.dispatch import Send, Stage
from pipeline.jobs.graph import GRAPH, START, NotInGraph, enter, queues, run_stage
from workers.celery_app import create_celery, task_name
from workers.embedded import EmbeddedWorkers
from workers.tasks import TASKS

IDS = ("document_id", "page_id", "delivery_id")


@dataclass
class Recorder:
    sent: list[tuple[str, str | int, float]] = field(default_factory=list)

    def send(self, stage: Stage, key: str | int, delay_s: float = 0.0) -> None:
        self.sent.append((stage, key, delay_s))


def context(tmp_path: Path, prepare_queue: str = "cpu") -> SimpleNamespace:
    """What run_stage reads of a Context: the settings (the queues), the dispatcher and the page images."""
    return SimpleNamespace(settings=Settings(cache_dir=tmp_path, _env_file=None, prepare_queue=prepare_queue),
                           dispatcher=Recorder(), page_images=PageImages())


def stage_returning(monkeypatch: pytest.MonkeyPatch, stage: Stage, *sends: Send) -> list[tuple[Stage, object]]:
    """Make `stage` a stand-in that returns `sends`; the list it returns records each run of a stand-in."""
    ran: list[tuple[Stage, object]] = []

    def run(ctx, key):
        ran.append((stage, key))
        return list(sends)

    monkeypatch.setitem(GRAPH, stage, replace(GRAPH[stage], run=run))
    return ran


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


def test_an_inline_edge_is_an_edge_and_only_prepare_runs_its_successor_in_its_thread():
    inline = {(stage, successor) for stage, node in GRAPH.items() for successor in node.inline}
    assert inline == {("prepare", "recognize")} and "recognize" in GRAPH["prepare"].next


def test_every_stage_is_keyed_by_the_id_its_code_takes_and_returns_its_sends():
    for stage, node in GRAPH.items():
        assert node.key in IDS, stage
        signature = inspect.signature(node.run)
        assert list(signature.parameters)[1] == node.key, stage
        assert signature.return_annotation == "list[Send]", stage


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


def test_the_runner_sends_what_a_stage_returned_on_the_dispatcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    ctx = context(tmp_path)
    stage_returning(monkeypatch, "ingest", Send("prepare", 1), Send("prepare", 2))
    stage_returning(monkeypatch, "deliver", Send("deliver", "d1", delay_s=2.0))
    run_stage(ctx, "ingest", "doc")
    run_stage(ctx, "deliver", "d1")
    assert ctx.dispatcher.sent == [("prepare", 1, 0.0), ("prepare", 2, 0.0), ("deliver", "d1", 2.0)]


@pytest.mark.parametrize(("sender", "stage"), [("recognize", "prepare"), ("ingest", "recognize"),
                                               ("finalize", "ingest"), ("ingest", "render")])
def test_a_send_off_the_graph_is_refused_and_none_of_the_stage_s_sends_is_made(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sender: Stage, stage: Stage):
    ctx = context(tmp_path)
    allowed = GRAPH[sender].next[0]
    stage_returning(monkeypatch, sender, Send(allowed, 1), Send(stage, 7))
    with pytest.raises(NotInGraph, match=f"{sender} may not send {stage}"):
        run_stage(ctx, sender, 1)
    assert ctx.dispatcher.sent == []
    with pytest.raises(NotInGraph, match="'render' is not a stage"):
        run_stage(ctx, "render", 7)  # type: ignore[arg-type]


@pytest.mark.parametrize(("prepare_queue", "inline"), [("cpu", False), ("gpu", True)])
def test_an_inline_successor_runs_in_this_thread_with_its_image_only_when_both_stages_share_a_queue(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, prepare_queue: str, inline: bool):
    ctx = context(tmp_path, prepare_queue)
    image = object()
    stage_returning(monkeypatch, "prepare", Send("recognize", 7, image=("key", image)), Send("finalize", "doc"))
    recognized = stage_returning(monkeypatch, "recognize")
    run_stage(ctx, "prepare", 7)
    assert recognized == ([("recognize", 7)] if inline else [])
    assert ctx.page_images.take("key") is (image if inline else None)
    assert ctx.dispatcher.sent == ([] if inline else [("recognize", 7, 0.0)]) + [("finalize", "doc", 0.0)]


def test_the_runner_logs_a_stage_before_what_it_ran_inline_and_a_stage_that_raises_sends_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path):
    ctx = context(tmp_path, "gpu")
    ran = []

    def prepare(ctx, page_id):
        ran.append(("prepare", page_id))
        if page_id == 2:
            raise RuntimeError("the database went away")
        return [Send("recognize", page_id)]

    monkeypatch.setitem(GRAPH, "prepare", replace(GRAPH["prepare"], run=prepare))
    monkeypatch.setitem(GRAPH, "recognize", replace(GRAPH["recognize"], run=lambda ctx, page_id: ran.append(
        ("recognize", page_id)) or []))
    caplog.set_level("INFO", logger="quire.stages")
    run_stage(ctx, "prepare", 1)
    with pytest.raises(RuntimeError):
        run_stage(ctx, "prepare", 2)
    assert ran == [("prepare", 1), ("recognize", 1), ("prepare", 2)]
    logged = [(record.stage, record.outcome) for record in caplog.records if record.name == "quire.stages"]
    assert logged == [("prepare", "done"), ("recognize", "done"), ("prepare", "raised")]
    assert ctx.dispatcher.sent == []


def test_work_enters_the_graph_only_at_an_entry():
    dispatcher = Recorder()
    enter(dispatcher, START, "doc")
    enter(dispatcher, "deliver", "d1", delay_s=1.0)
    for stage in ("prepare", "recognize", "finalize"):
        with pytest.raises(NotInGraph, match="not an entry"):
            enter(dispatcher, stage, 7)
    assert dispatcher.sent == [(START, "doc", 0.0), ("deliver", "d1", 1.0)]


def test_only_the_graph_calls_a_dispatcher_and_no_route_names_a_stage():
    def parsed(package: Path, name: str):
        for path in sorted(package.rglob("*.py")):
            dotted = ".".join((name, *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
            yield dotted, ast.parse(path.read_text(), str(path))

    def sends(tree: ast.Module) -> bool:
        return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "send"
                   for node in ast.walk(tree))

    senders = [module for package, name in ((Path(pipeline.jobs.__file__).parent, "pipeline.jobs"),
                                            (Path(api.__file__).parent, "api"))
               for module, tree in parsed(package, name) if sends(tree)]
    assert senders == ["pipeline.jobs.graph"]
    for module, tree in parsed(Path(api.__file__).parent / "routes", "api.routes"):
        named = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)} & set(GRAPH)
        assert not named, f"{module} names the stages {named}"


def test_a_done_line_carries_the_stage_s_wall_time_and_its_thread_s_cpu_time(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path):
    def busy_then_idle(ctx, page_id):
        spin_until = time.thread_time() + 0.05
        while time.thread_time() < spin_until:
            pass
        time.sleep(0.1)  # waiting (as a recognize waits on the engine) costs the thread no CPU
        return []

    monkeypatch.setitem(GRAPH, "recognize", replace(GRAPH["recognize"], run=busy_then_idle))
    caplog.set_level("INFO", logger="quire.stages")
    run_stage(context(tmp_path), "recognize", 1)
    (done,) = [record for record in caplog.records if record.name == "quire.stages"]
    assert done.duration_ms >= 150 and 50 <= done.cpu_ms < 120
