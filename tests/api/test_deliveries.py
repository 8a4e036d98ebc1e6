"""Webhooks at the API: a callback URL into the service's own network is refused at upload, and a document's
delivery attempts are listed for its tenant only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from api.app import create_app
from api.schemas import DocumentStatus
from pipeline.config import Settings
from pipeline.db.models import Document, WebhookDelivery
from pipeline.db.session import session_scope
from pipeline.jobs.context import open_context
from pipeline.jobs.summaries import document_summary
from tests.api.conftest import RecordingDispatcher, corpus, stored_files, upload
from tests.api.test_documents import add_page, set_document
from tests.api.test_upload import assert_error

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/", "http://169.254.169.254/", "http://[::1]/hook",
                                 "http://10.0.0.5/hook", "ftp://example.com/"])
def test_an_upload_whose_callback_url_quire_will_not_call_is_refused_and_stores_nothing(
        client: TestClient, settings: Settings, dispatcher: RecordingDispatcher, db: Engine, url: str) -> None:
    error = assert_error(upload(client, corpus(), callback_url=url), 422, "callback_url_refused")
    assert url in error["message"]
    assert dispatcher.sent == []
    assert stored_files(settings.blob_dir) == []
    with session_scope(db) as session:
        assert session.scalar(select(func.count()).select_from(Document)) == 0


def test_a_host_dns_does_not_know_yet_is_accepted_at_upload_and_checked_again_when_delivering(
        client: TestClient) -> None:
    assert upload(client, corpus(), callback_url="https://hooks.invalid/quire").status_code == 202


def test_the_allow_list_lets_a_loopback_callback_through(settings: Settings) -> None:
    allowing = settings.model_copy(update={"webhook_allow": ["127.0.0.1"]})
    with TestClient(create_app(open_context(allowing, RecordingDispatcher()), tenant="acme")) as client:
        assert upload(client, corpus(), callback_url="http://127.0.0.1:9/").status_code == 202
        assert_error(upload(client, corpus(), callback_url="http://169.254.169.254/"), 422, "callback_url_refused")


def test_deliveries_are_listed_newest_first_with_what_each_attempt_got(client: TestClient, db: Engine) -> None:
    document_id = upload(client, corpus()).json()["id"]
    attempts = [dict(attempt=1, status_code=500, error="HTTP 500", next_attempt_at=T0 + timedelta(seconds=2)),
                dict(attempt=2, status_code=None, error="ConnectError", next_attempt_at=T0 + timedelta(seconds=16)),
                dict(attempt=3, status_code=200, error=None, succeeded=True, next_attempt_at=None)]
    with session_scope(db) as session:
        for n, values in enumerate(attempts):
            moment = T0 + timedelta(seconds=10 * n)
            session.add(WebhookDelivery(delivery_id="d-1", tenant="acme", document_id=document_id,
                                        event="document.succeeded", url="https://hooks.example.com/q",
                                        duration_ms=12.5, created_at=moment, attempted_at=moment, **values))
    items = client.get(f"/v1/documents/{document_id}/deliveries").json()["items"]
    assert [(item["attempt"], item["status_code"], item["error"], item["succeeded"]) for item in items] == [
        (3, 200, None, True), (2, None, "ConnectError", False), (1, 500, "HTTP 500", False)]
    assert items[2] == {"delivery_id": "d-1", "event": "document.succeeded", "url": "https://hooks.example.com/q",
                        "attempt": 1, "status_code": 500, "error": "HTTP 500", "succeeded": False,
                        "duration_ms": 12.5, "next_attempt_at": "2026-01-02T03:04:07Z",
                        "attempted_at": "2026-01-02T03:04:05Z", "created_at": "2026-01-02T03:04:05Z"}


def test_deliveries_of_an_unknown_or_another_tenant_s_document_are_not_found(client: TestClient,
                                                                            settings: Settings) -> None:
    document_id = upload(client, corpus()).json()["id"]
    assert client.get(f"/v1/documents/{document_id}/deliveries").json() == {"items": []}
    other = TestClient(create_app(open_context(settings, RecordingDispatcher()), tenant="globex"))
    assert_error(other.get(f"/v1/documents/{document_id}/deliveries"), 404, "document_not_found")
    assert_error(client.get("/v1/documents/no-such-id/deliveries"), 404, "document_not_found")


def test_a_webhook_s_data_is_the_document_as_its_status_endpoint_shows_it(client: TestClient, db: Engine) -> None:
    document_id = upload(client, corpus(), password="secret").json()["id"]
    set_document(db, document_id, status="partial", page_count=2, pages_done=2, media_type="application/pdf",
                 started_at=T0, finished_at=T0 + timedelta(seconds=3), timings={"total": 3000.0})
    add_page(db, document_id, 0, regions=("succeeded", "failed"))
    add_page(db, document_id, 1, status="failed")
    shown = client.get(f"/v1/documents/{document_id}").json()
    with session_scope(db) as session:
        data = document_summary(session, session.get_one(Document, document_id))
    as_json = DocumentStatus.model_validate({**data, "links": shown["links"]}).model_dump(mode="json")
    assert as_json == shown


def test_a_cancel_announces_document_canceled_once(settings: Settings, db: Engine) -> None:
    dispatcher = RecordingDispatcher()
    allowing = settings.model_copy(update={"webhook_allow": ["127.0.0.1"]})
    with TestClient(create_app(open_context(allowing, dispatcher), tenant="acme")) as client:
        document_id = upload(client, corpus(), callback_url="http://127.0.0.1:9/hook").json()["id"]
        assert client.post(f"/v1/documents/{document_id}/cancel").status_code == 200
        assert client.post(f"/v1/documents/{document_id}/cancel").status_code == 200  # no second event
    with session_scope(db) as session:
        events = session.scalars(select(WebhookDelivery).where(WebhookDelivery.document_id == document_id)).all()
    assert [(event.event, event.url) for event in events] == [("document.canceled", "http://127.0.0.1:9/hook")]
    assert [key for stage, key, *_ in dispatcher.sent if stage == "deliver"] == [events[0].delivery_id]
