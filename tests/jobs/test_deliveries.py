"""Webhooks from the stages, with the embedded workers on the real tiny engine and a receiver on loopback: a final
document announces its event once, `deliver` retries 5xx with backoff until the receiver takes it and records every
attempt, a batch announces `batch.finished` once, and every request is signed with the tenant's secret."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.accounts import ensure_tenant, set_callback_url
from pipeline.db.migrate import upgrade_to_head
from pipeline.db.models import Batch, Document, WebhookDelivery
from pipeline.db.session import session_scope
from pipeline.jobs.events import announce_document
from pipeline.jobs.graph import run_stage
from pipeline.jobs.options import DocumentOptions
from pipeline.jobs.start import start_document
from pipeline.webhooks import verify
from tests.documents.samples import ENCRYPTED
from tests.jobs.conftest import accept, wait_until_final
from tests.jobs.expected import CORPUS, service_settings
from tests.local_stack import scratch_database
from tests.receiver import Received, receiver
from workers.embedded import EmbeddedWorkers
from workers.engine_host import EngineHost

pytestmark = pytest.mark.slow  # waits out real retry delays

ONE_PAGE = (CORPUS / "minimal-document.pdf").read_bytes()
FAST_RETRIES = {"webhook_allow": ["127.0.0.1"], "webhook_backoff_s": 0.05, "webhook_backoff_max_s": 0.2,
                "webhook_timeout_s": 5.0}


@pytest.fixture(params=["sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """SQLite in tmp_path; a test parametrized with "postgres" (indirect) gets a scratch Postgres database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'quire.db'}"
    else:
        with scratch_database("quire_webhooks") as url:
            yield url


@pytest.fixture
def make_workers(tmp_path: Path, tiny_checkpoint: Path, engine_host: EngineHost,
                 database_url: str) -> Iterator[Callable[..., EmbeddedWorkers]]:
    """Embedded workers with loopback receivers allowed and retries in tenths of a second (overridable)."""
    made: list[EmbeddedWorkers] = []

    def make(**settings: Any) -> EmbeddedWorkers:
        resolved = service_settings(tmp_path, tiny_checkpoint).model_copy(
            update={"database_url": database_url, **FAST_RETRIES, **settings})
        upgrade_to_head(resolved.database_url)
        made.append(EmbeddedWorkers(resolved, engine_host, 2, 2))
        return made[-1]

    yield make
    for workers in made:
        workers.close()


@pytest.fixture
def workers(make_workers: Callable[..., EmbeddedWorkers]) -> EmbeddedWorkers:
    return make_workers()


def tenant_secret(workers: EmbeddedWorkers, tenant: str = "acme", callback_url: str | None = None,
                  allowed_then: tuple[str, ...] = ()) -> str:
    """The tenant's webhook secret; its default callback URL set as QUIRE_WEBHOOK_ALLOW was then (`allowed_then`)."""
    with session_scope(workers.context.db) as session:
        secret = ensure_tenant(session, tenant)[0].webhook_secret
        if callback_url is not None:
            set_callback_url(session, tenant, callback_url, allowed_then)
    return secret


def attempts(workers: EmbeddedWorkers, done: int, timeout_s: float = 30.0, **where: Any) -> list[WebhookDelivery]:
    """The delivery rows matching where, in attempt order, once `done` of them are made and none is scheduled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope(workers.context.db) as session:
            rows = list(session.scalars(select(WebhookDelivery).filter_by(**where)
                                        .order_by(WebhookDelivery.delivery_id, WebhookDelivery.attempt)))
        if sum(row.attempted_at is not None for row in rows) >= done and all(row.attempted_at for row in rows):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"{done} attempts were not made in {timeout_s} s: {rows}")


def assert_signed(request: Received, secret: str) -> None:
    assert verify(secret, request.headers["quire-signature"], request.body), request.headers


def test_a_receiver_failing_twice_gets_one_delivery_after_two_recorded_failures(workers):
    secret = tenant_secret(workers)
    with receiver(500, 500) as hooks:
        document_id = accept(workers, ONE_PAGE, "one.pdf", callback_url=hooks.url)
        assert wait_until_final(workers, document_id).status == "succeeded"
        rows = attempts(workers, 3, document_id=document_id)
        time.sleep(0.5)  # longer than any backoff here: no fourth request comes
        requests = hooks.wait_for(3)
    assert len(requests) == 3
    assert [(r.attempt, r.status_code, r.succeeded, r.error) for r in rows] == [
        (1, 500, False, "HTTP 500"), (2, 500, False, "HTTP 500"), (3, 200, True, None)]
    assert rows[0].next_attempt_at and rows[1].next_attempt_at and rows[2].next_attempt_at is None
    assert rows[0].attempted_at <= rows[0].next_attempt_at <= rows[1].attempted_at
    assert len({row.delivery_id for row in rows}) == 1
    for request in requests:
        assert_signed(request, secret)
        assert request.headers["quire-delivery"] == rows[0].delivery_id
        assert request.headers["quire-event"] == "document.succeeded"
        assert request.headers["content-type"] == "application/json"
    event = requests[-1].event
    assert (event["id"], event["type"]) == (rows[0].delivery_id, "document.succeeded")
    assert (event["data"]["id"], event["data"]["status"], event["data"]["page_count"]) == (document_id, "succeeded", 1)
    assert event["data"]["options"]["callback_url"] == hooks.url
    assert [json.loads(r.body)["created"] for r in requests] == [event["created"]] * 3  # one event, three tries


def test_a_4xx_answer_is_final(workers):
    tenant_secret(workers)
    with receiver(404) as hooks:
        document_id = accept(workers, ONE_PAGE, "one.pdf", callback_url=hooks.url)
        (row,) = attempts(workers, 1, document_id=document_id)
        time.sleep(0.3)
        assert len(hooks.received) == 1
    assert (row.status_code, row.succeeded, row.error, row.next_attempt_at) == (404, False, "HTTP 404", None)


@pytest.mark.parametrize("asked, waited", [("1", 1.0), ("3600", 1.5)])
def test_a_receiver_s_retry_after_is_waited_out_up_to_the_backoff_cap(make_workers, asked, waited):
    workers = make_workers(webhook_backoff_max_s=1.5)
    tenant_secret(workers)
    with receiver(429, retry_after=asked) as hooks:
        document_id = accept(workers, ONE_PAGE, "one.pdf", callback_url=hooks.url)
        first, second = attempts(workers, 2, document_id=document_id)
    assert (first.status_code, second.succeeded) == (429, True)
    assert (first.next_attempt_at - first.attempted_at).total_seconds() >= waited - 0.01
    assert (second.attempted_at - first.attempted_at).total_seconds() >= waited - 0.01


def test_retries_stop_at_the_end_of_the_retry_window(make_workers):
    workers = make_workers(webhook_retry_window_s=0.0)
    tenant_secret(workers)
    with receiver(503, 503) as hooks:
        document_id = accept(workers, ONE_PAGE, "one.pdf", callback_url=hooks.url)
        (row,) = attempts(workers, 1, document_id=document_id)
        time.sleep(0.3)
        assert len(hooks.received) == 1
    assert (row.status_code, row.next_attempt_at) == (503, None)


def test_a_failed_document_goes_to_the_tenant_s_default_url_and_a_private_one_is_refused_when_sent(make_workers):
    """The tenant's URL was checked when it was set, but the allow-list and DNS may change since: deliver checks
    again."""
    workers = make_workers(webhook_allow=[])
    tenant_secret(workers, callback_url="http://10.1.2.3/hooks", allowed_then=("10.1.2.3",))
    document_id = accept(workers, (CORPUS / ENCRYPTED).read_bytes(), "locked.pdf")
    assert wait_until_final(workers, document_id).status == "failed"
    (row,) = attempts(workers, 1, document_id=document_id)
    assert (row.event, row.url, row.status_code, row.succeeded, row.next_attempt_at) == (
        "document.failed", "http://10.1.2.3/hooks", None, False, None)
    assert row.error.startswith("callback_url_refused: ") and "10.1.2.3" in row.error


def test_a_document_without_a_callback_url_announces_nothing(workers):
    tenant_secret(workers)
    document_id = accept(workers, ONE_PAGE, "one.pdf")
    wait_until_final(workers, document_id)
    time.sleep(0.2)
    with session_scope(workers.context.db) as session:
        assert session.scalars(select(WebhookDelivery)).all() == []


@pytest.mark.parametrize("database_url", ["sqlite", "postgres"], indirect=True)
def test_a_batch_announces_batch_finished_once_after_its_last_document(workers):
    """Its documents finish on two threads at once; on Postgres the batch's row lock orders the last two."""
    secret = tenant_secret(workers)
    with receiver() as hooks:
        # each document's and the batch's target, set while QUIRE_WEBHOOK_ALLOW named the receiver
        tenant_secret(workers, callback_url=hooks.url, allowed_then=("127.0.0.1",))
        ctx = workers.context
        key = ctx.blobs.put(ONE_PAGE)
        options = DocumentOptions().resolved(ctx.settings).model_dump()
        with session_scope(ctx.db) as session:
            batch = Batch(tenant="acme", document_count=4)
            session.add(batch)
            session.flush()
            documents = [Document(tenant="acme", filename=f"{i}.pdf", sha256=key, size_bytes=len(ONE_PAGE),
                                  options=options, batch_id=batch.id) for i in range(4)]
            session.add_all(documents)
            session.flush()
            batch_id, document_ids = batch.id, [document.id for document in documents]
        for document_id in document_ids:
            start_document(workers, document_id)
        for document_id in document_ids:
            wait_until_final(workers, document_id)
        (finished,) = attempts(workers, 1, batch_id=batch_id)
        requests = hooks.wait_for(5)
        time.sleep(0.3)
        assert len(hooks.received) == 5
    events = sorted(request.event["type"] for request in requests)
    assert events == ["batch.finished"] + ["document.succeeded"] * 4
    (announced,) = [request for request in requests if request.event["type"] == "batch.finished"]
    assert_signed(announced, secret)
    data = announced.event["data"]
    assert (data["id"], data["document_count"], data["documents"]) == (batch_id, 4, {"succeeded": 4})
    assert (finished.event, finished.succeeded, finished.document_id) == ("batch.finished", True, None)
    with session_scope(ctx.db) as session:
        assert session.get_one(Batch, batch_id).finished_at is not None


def test_deliver_run_again_after_its_attempt_was_recorded_does_nothing(workers):
    tenant_secret(workers)
    with receiver() as hooks:
        document_id = accept(workers, ONE_PAGE, "one.pdf", callback_url=hooks.url)
        (row,) = attempts(workers, 1, document_id=document_id)
        run_stage(workers.context, "deliver", row.delivery_id)
        assert len(hooks.received) == 1
    (again,) = attempts(workers, 1, document_id=document_id)
    assert (again.id, again.attempt, again.attempted_at) == (row.id, 1, row.attempted_at)


def test_resume_sends_an_announced_event_whose_deliver_never_went_out(workers):
    """A crash between the commit that recorded an event and the send of `deliver`, then a restart."""
    secret = tenant_secret(workers)
    with receiver() as hooks:
        document_id = accept(workers, ONE_PAGE, "one.pdf", send=False, callback_url=hooks.url)
        with session_scope(workers.context.db) as session:
            session.get_one(Document, document_id).status = "canceled"
            session.flush()
            (delivery_id,) = announce_document(session, document_id)
        assert hooks.received == []
        assert workers.resume() == 1
        (row,) = attempts(workers, 1, document_id=document_id)
        (request,) = hooks.wait_for(1)
    assert (row.delivery_id, row.event, row.succeeded) == (delivery_id, "document.canceled", True)
    assert_signed(request, secret)
