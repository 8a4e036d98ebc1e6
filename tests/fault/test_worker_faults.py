"""Faults in the distributed service: a worker killed with SIGKILL mid-document, and Redis restarted mid-run.

The document still succeeds, every region has exactly one row, and no page is finished twice (each page is counted
once on its document, and a page finished before the fault keeps its regions' first and only attempt).

These tests kill processes, so they run a service of their own rather than the session's: a throwaway Redis on a
free port, a scratch Postgres database, `quire serve` and a CPU and a GPU worker. Redis runs as an operator would
configure it for Celery: append-only file on (in a temp dir), so a restarted Redis still holds the queues and the
unacknowledged tasks. A killed worker's tasks are unacknowledged; Redis hands them out again once the visibility
timeout has passed, which the service here sets to a few seconds (QUIRE_BROKER_VISIBILITY_TIMEOUT_S) instead of
the production hour.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, func, select

from pipeline.db.models import Document, Page, Region
from tests.conftest import scratch_database
from tests.service.conftest import Service, free_port, quire_env, start, wait_for_health, wait_for_workers
from tests.service.test_documents import one_page_pdf, upload, wait_until_final

PAGES = 10
# The engine's torch path rather than its compiled CPU kernel: a worker killed while torch builds the kernel would
# leave torch's build lock behind, and every engine loading after it would wait on that lock forever.
SETTINGS = {"QUIRE_BROKER_VISIBILITY_TIMEOUT_S": "2", "QUIRE_CPU_KERNELS": "0"}


@dataclass
class Faulty:
    """The service under test and handles on the processes a test may kill."""

    service: Service
    root: Path
    redis_port: int
    processes: list[subprocess.Popen] = field(default_factory=list)
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    redis: subprocess.Popen | None = None

    @property
    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def start_redis(self) -> None:
        """redis-server on its port, keeping an append-only file in its own directory (what a restart reads back)."""
        log = self.root / "redis.log"
        with log.open("ab") as out:
            self.redis = subprocess.Popen(
                ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "yes", "--dir", str(self.root / "redis")], stdout=out, stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.redis_port)
        until(lambda: _pings(client), 10, "Redis did not answer a ping", log.read_text)

    def stop_redis(self) -> None:
        """A clean stop (SIGTERM): Redis writes its append-only file out before it exits."""
        assert self.redis is not None
        self.redis.terminate()
        self.redis.wait(timeout=10)

    def start_worker(self, queue: str) -> None:
        """A worker taking one task at a time, so a 10-page document is still being worked on when a fault hits."""
        log = self.root / f"{queue}-{len(self.service.logs)}.log"
        self.service.logs.append(log)
        self.workers[queue] = start(self.processes, log, self.service.env, "worker", "--queues", queue,
                                    "--concurrency", "1", new_session=True)

    def wait_for_workers(self, *queues: str) -> None:
        wait_for_workers(self.broker_url, {f"quire-{queue}" for queue in queues}, self.service, timeout_s=90)

    def kill_worker(self, queue: str) -> None:
        """SIGKILL to the worker's whole process group: the Celery parent and any pool children with it."""
        worker = self.workers.pop(queue)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def until(condition: Callable[[], bool], timeout_s: float, message: str, tail: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{message} in {timeout_s} s\n{tail()}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Iterator[Faulty]:
    root = tmp_path_factory.mktemp("faults")
    (root / "redis").mkdir()
    port = free_port()
    fault = Faulty(Service(f"http://127.0.0.1:{port}", "", [root / "serve.log"]), root, free_port())
    fault.start_redis()
    try:
        with scratch_database("quire_faults") as database_url:
            fault.service.database_url = database_url
            fault.service.env = quire_env(root, tiny_checkpoint, QUIRE_DATABASE_URL=database_url,
                                          QUIRE_BROKER_URL=fault.broker_url, QUIRE_API_KEYS="off", **SETTINGS)
            try:
                start(fault.processes, fault.service.logs[0], fault.service.env, "serve", "--port", str(port),
                      new_session=True)
                fault.start_worker("cpu")
                fault.start_worker("gpu")
                wait_for_health(fault.service, fault.processes)
                fault.wait_for_workers("cpu", "gpu")
                warm_up = upload(fault.service, one_page_pdf("Warm-up"), "warm-up.pdf")  # the engine loads on it
                assert wait_until_final(fault.service, warm_up["id"], timeout_s=120)["status"] == "succeeded"
                yield fault
            finally:
                _stop(fault.processes)  # before the database is dropped under them
    finally:
        if fault.redis is not None and fault.redis.poll() is None:
            fault.redis.kill()
            fault.redis.wait(timeout=10)


def _stop(processes: list[subprocess.Popen]) -> None:
    """TERM, then KILL what is still there after a few seconds (each runs in a process group of its own)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def pages(fault: Faulty, document_id: str) -> dict[str, list[int]]:
    """The document's page ids by status."""
    database = create_engine(fault.service.database_url)
    try:
        with database.connect() as connection:
            rows = connection.execute(select(Page.status, Page.id).where(Page.document_id == document_id)).all()
    finally:
        database.dispose()
    by_status: dict[str, list[int]] = {}
    for status, page_id in rows:
        by_status.setdefault(status, []).append(page_id)
    return by_status


def assert_done_once(fault: Faulty, document_id: str, finished_before: list[int]) -> None:
    """Succeeded; one row per region; every page counted once; the pages finished before the fault untouched."""
    status = wait_until_final(fault.service, document_id, timeout_s=90)
    assert status["status"] == "succeeded", status
    database = create_engine(fault.service.database_url)
    try:
        with database.connect() as connection:
            document = connection.execute(select(Document.pages_done, Document.page_count)
                                          .where(Document.id == document_id)).one()
            regions = connection.execute(
                select(Page.id, Region.index, func.count(), func.max(Region.attempts), func.min(Region.status))
                .join(Page).where(Page.document_id == document_id).group_by(Page.id, Region.index)).all()
    finally:
        database.dispose()
    assert tuple(document) == (PAGES, PAGES)
    assert {page_id for page_id, *_ in regions} == set(pages(fault, document_id)["succeeded"])
    assert all(count == 1 and status == "succeeded" for _, _, count, _, status in regions), regions
    assert all(attempts == 1 for page_id, _, _, attempts, _ in regions if page_id in finished_before), regions


def wait_for(fault: Faulty, document_id: str, ready: Callable[[dict[str, list[int]]], bool]) -> dict[str, list[int]]:
    """Poll the document's pages until ready says they are in the state a fault should hit; that state."""
    seen: dict[str, list[int]] = {}

    def check() -> bool:
        nonlocal seen
        seen = pages(fault, document_id)
        return ready(seen)

    until(check, 90, f"the pages of {document_id} never got there (last seen {seen})", fault.service.tail)
    return seen


def test_a_gpu_worker_killed_mid_document_is_replaced_and_every_page_is_finished_once(faulty: Faulty) -> None:
    document = upload(faulty.service, one_page_pdf("The GPU worker dies", pages=PAGES), "gpu.pdf")
    seen = wait_for(faulty, document["id"], lambda by: 1 <= len(by.get("succeeded", [])) <= PAGES - 3)
    faulty.kill_worker("gpu")
    faulty.start_worker("gpu")
    faulty.wait_for_workers("gpu")
    assert_done_once(faulty, document["id"], seen["succeeded"])


def test_a_cpu_worker_killed_while_rendering_is_replaced_and_every_page_is_finished_once(faulty: Faulty) -> None:
    document = upload(faulty.service, one_page_pdf("The CPU worker dies", pages=PAGES), "cpu.pdf",
                      dpi="300")  # rendering takes a while at 300 dpi
    seen = wait_for(faulty, document["id"], lambda by: len(by.get("queued", [])) in range(1, PAGES - 1))
    faulty.kill_worker("cpu")
    faulty.start_worker("cpu")
    faulty.wait_for_workers("cpu")
    assert_done_once(faulty, document["id"], seen.get("succeeded", []))


def test_documents_succeed_across_a_redis_restart_even_one_uploaded_while_redis_is_down(faulty: Faulty) -> None:
    document = upload(faulty.service, one_page_pdf("Redis restarts", pages=PAGES), "redis.pdf")
    seen = wait_for(faulty, document["id"], lambda by: 1 <= len(by.get("succeeded", [])) <= PAGES - 3)
    faulty.stop_redis()
    with ThreadPoolExecutor(1) as pool:
        during = pool.submit(upload, faulty.service, one_page_pdf("Sent while Redis is down", pages=PAGES),
                             "during.pdf")
        time.sleep(1.5)
        faulty.start_redis()
        uploaded = during.result(timeout=30)  # the API's send to ingest waited for Redis to come back
    assert_done_once(faulty, document["id"], seen["succeeded"])
    assert_done_once(faulty, uploaded["id"], [])
