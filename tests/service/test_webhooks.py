"""Webhooks in the distributed mode: real Postgres, Redis and Celery workers deliver to a receiver on loopback
(allowed by QUIRE_WEBHOOK_ALLOW=127.0.0.1 in the `distributed` fixture, with retries in tenths of a second)."""

from __future__ import annotations

import time
from typing import Any

import httpx
from sqlalchemy import create_engine, select

from pipeline.db.models import Tenant
from pipeline.webhooks import verify
from tests.receiver import receiver
from tests.service.conftest import Service
from tests.service.test_documents import one_page_pdf, upload, wait_until_final


def deliveries(service: Service, document_id: str, made: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """GET /deliveries, once `made` attempts are made and none is scheduled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(f"{service.url}/v1/documents/{document_id}/deliveries", headers=service.headers(),
                             timeout=10)
        assert response.status_code == 200, response.text
        items = response.json()["items"]
        if len(items) >= made and all(item["attempted_at"] for item in items):
            return items
        time.sleep(0.1)
    raise AssertionError(f"{made} delivery attempts were not made in {timeout_s} s: {items}\n{service.tail()}")


def webhook_secret(service: Service, tenant: str = "acme") -> str:
    engine = create_engine(service.database_url)
    try:
        with engine.connect() as connection:
            return connection.execute(select(Tenant.webhook_secret).where(Tenant.id == tenant)).scalar_one()
    finally:
        engine.dispose()


def test_a_receiver_failing_twice_with_500_gets_one_delivery_after_two_recorded_failures(distributed):
    with receiver(500, 500) as hooks:
        document = upload(distributed, one_page_pdf("webhook receiver"), "hooked.pdf", callback_url=hooks.url)
        assert wait_until_final(distributed, document["id"])["status"] == "succeeded"
        items = deliveries(distributed, document["id"], 3)
        time.sleep(1.0)  # twice the longest backoff here: no fourth request comes
        requests = hooks.wait_for(3)
    assert len(requests) == 3, distributed.tail()
    assert [(item["attempt"], item["status_code"], item["succeeded"]) for item in items] == [
        (3, 200, True), (2, 500, False), (1, 500, False)]
    assert {(item["delivery_id"], item["event"], item["url"]) for item in items} == {
        (requests[0].headers["quire-delivery"], "document.succeeded", hooks.url)}
    secret = webhook_secret(distributed)
    assert all(verify(secret, request.headers["quire-signature"], request.body) for request in requests)
    event = requests[-1].event
    assert (event["type"], event["data"]["id"], event["data"]["status"]) == (
        "document.succeeded", document["id"], "succeeded")


def test_callbacks_into_the_metadata_service_or_loopback_v6_are_refused_at_upload(distributed):
    """The service allows 127.0.0.1 (its test receiver) and nothing else private."""
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[::1]:8080/hook", "http://10.1.2.3/hook"):
        response = httpx.post(f"{distributed.url}/v1/documents", data={"callback_url": url},
                              files={"file": ("ssrf.pdf", one_page_pdf(f"ssrf {url}"))},
                              headers=distributed.headers(), timeout=30)
        assert (response.status_code, response.json()["error"]["code"]) == (422, "callback_url_refused"), url
