"""The service the fault tests break: `quire serve`, a CPU and a GPU worker, on a Redis and a Postgres cluster the
tests own (tests/fault/owned.py), so a test may kill a worker, restart Redis or stop Postgres.

Each worker takes one task at a time, so a 10-page document is still being worked on when a fault hits. A killed
worker's tasks are unacknowledged; Redis hands them out again once the visibility timeout has passed, which the
service here sets to two seconds (QUIRE_BROKER_VISIBILITY_TIMEOUT_S) instead of the production hour. The reaper runs
every two seconds and takes a document for lost after 20 s without movement (production: a minute and 15 minutes),
so work that no redelivery covers comes back within a test's time.

`faulty_s3` is the same service with its blobs in a bucket of the real S3 server instead of a directory: the
service tests that matter for a blob store (upload → poll → result, a batch, a refused upload, a delete) and the
kill of a GPU worker run on it too (tests/fault/test_s3_blobs.py, tests/fault/test_worker_faults.py), once each.

Every fault test ends with `assert_done_once`: the document succeeded, every region has exactly one row, every page
was counted once, and the pages finished before the fault kept their regions' first and only attempt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from pipeline.db.models import Document, Page, Region
from tests import s3
from tests.fault.owned import OwnedPostgres, OwnedRedis, until
from tests.local_stack import free_port
from tests.service.conftest import (
    WEBHOOKS,
    Service,
    quire_env,
    start,
    wait_for_health,
    wait_for_workers,
)
from tests.service.test_documents import one_page_pdf, upload, wait_until_final

PAGES = 10
REAP_AFTER_S = 20
# The engine's torch path rather than its compiled CPU kernel: a worker killed while torch builds the kernel would
# leave torch's build lock behind, and every engine loading after it would wait on that lock forever.
SETTINGS = {"QUIRE_BROKER_VISIBILITY_TIMEOUT_S": "2", "QUIRE_CPU_KERNELS": "0",
            "QUIRE_REAP_AFTER_S": str(REAP_AFTER_S), "QUIRE_REAP_INTERVAL_S": "2"}


@dataclass
class Faulty:
    """The service under test and handles on what a test may break."""

    service: Service
    root: Path
    redis: OwnedRedis
    postgres: OwnedPostgres
    processes: list[subprocess.Popen] = field(default_factory=list)
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start_worker(self, queue: str) -> None:
        log = self.root / f"{queue}-{len(self.service.logs)}.log"
        self.service.logs.append(log)
        self.workers[queue] = start(self.processes, log, self.service.env, "worker", "--queues", queue,
                                    "--concurrency", "1", new_session=True)

    def wait_for_workers(self, *queues: str) -> None:
        wait_for_workers(self.redis.url, {f"quire-{queue}" for queue in queues}, self.service, timeout_s=90)

    def kill_worker(self, queue: str) -> None:
        """SIGKILL to the worker's whole process group: the Celery parent and any pool children with it."""
        worker = self.workers.pop(queue)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)

    def workers_alive(self) -> bool:
        return all(worker.poll() is None for worker in self.workers.values())

    def logged(self, *parts: str) -> list[str]:
        """The log lines of every process here that contain all of parts."""
        return [line for log in self.service.logs for line in log.read_text(errors="replace").splitlines()
                if all(part in line for part in parts)]


@pytest.fixture(scope="package")
def faulty(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Iterator[Faulty]:
    with _faulty_service(tmp_path_factory.mktemp("faults"), tiny_checkpoint, QUIRE_API_KEYS="off") as fault:
        yield fault


@pytest.fixture(scope="package")
def faulty_s3(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Iterator[Faulty]:
    """The same service with its blobs in a bucket of the real S3 server (tests/s3.py) instead of a directory:
    uploads go up in parts of 5 MiB and the upload limit is 6 MiB, so a refused upload has started a multipart
    upload. It requires API keys (tenants `acme` and `globex`) and calls webhooks on loopback, so the service tests
    run on it as they are."""
    with s3.fresh_bucket() as bucket, _faulty_service(
            tmp_path_factory.mktemp("faults-s3"), tiny_checkpoint, QUIRE_API_KEYS="required",
            QUIRE_BLOB_URL=f"s3://{bucket}/quire", QUIRE_S3_PART_BYTES=str(5 << 20),
            QUIRE_MAX_UPLOAD_BYTES=str(6 << 20), **WEBHOOKS, **s3.ENV) as fault:
        yield fault


@contextmanager
def _faulty_service(root: Path, tiny_checkpoint: Path, **settings: str) -> Iterator[Faulty]:
    """`quire serve`, a CPU and a GPU worker on an owned Redis and Postgres, warmed up; keys made for `acme` and
    `globex` when the settings require them."""
    port = free_port()
    fault = Faulty(Service(f"http://127.0.0.1:{port}", "", [root / "serve.log"]), root, OwnedRedis(root),
                   OwnedPostgres())
    try:
        fault.redis.start()
        fault.postgres.start()
        fault.service.database_url = fault.postgres.create_database(f"quire_faults_{uuid.uuid4().hex[:8]}")
        fault.service.env = quire_env(root, tiny_checkpoint, QUIRE_DATABASE_URL=fault.service.database_url,
                                      QUIRE_BROKER_URL=fault.redis.url, **SETTINGS, **settings)
        if settings["QUIRE_API_KEYS"] == "required":
            fault.service.keys = {tenant: fault.service.quire("keys", "create", "--tenant", tenant).strip()
                                  for tenant in ("acme", "globex")}
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
        _stop(fault.processes)  # before their database and broker go
        fault.redis.stop()
        fault.postgres.remove()


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


def mid_document(fault: Faulty, title: str) -> tuple[str, list[int]]:
    """A 10-page document uploaded and seen with between one and seven pages finished; its id and those pages."""
    document = upload(fault.service, one_page_pdf(title, pages=PAGES), f"{title}.pdf")
    seen = wait_for(fault, document["id"], lambda by: 1 <= len(by.get("succeeded", [])) <= PAGES - 3)
    return document["id"], seen["succeeded"]
