"""What operators watch: /healthz (the process), /readyz (its database and broker), and Prometheus /metrics."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from tests.api.conftest import RecordingDispatcher, corpus, upload


@dataclass
class ObservedDispatcher(RecordingDispatcher):
    """A recording dispatcher that also reports queue depths and engine counters, as the embedded workers do;
    these tests are about how /metrics exposes them, not about where they come from."""

    def queue_depths(self) -> dict[str, int]:
        return {"cpu": 3, "gpu": 1}

    def engine_stats(self) -> dict[str, int] | None:
        return {"blocks_used": 12, "prefix_hit_tokens": 640}


def test_healthz_only_needs_the_process_and_readyz_needs_the_database(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "problems": []}
    assert client.get("/readyz").status_code == 200


def test_readyz_is_503_and_names_an_unreachable_broker(settings: Settings) -> None:
    broken = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})  # nothing listens on port 1
    with TestClient(create_app(broken, RecordingDispatcher(), tenant="acme")) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable" and response.json()["problems"][0].startswith("broker:")


def test_metrics_count_requests_by_route_template_and_show_documents_queues_and_engine(settings: Settings) -> None:
    with TestClient(create_app(settings, ObservedDispatcher(), tenant="acme")) as client:
        assert upload(client, corpus()).status_code == 202
        client.get("/v1/documents/no-such-document")
        text = client.get("/metrics").text
    assert 'quire_http_requests_total{method="GET",route="/v1/documents/{document_id}",status="404"} 1.0' in text
    assert 'quire_http_requests_total{method="POST",route="/v1/documents",status="202"} 1.0' in text
    assert 'quire_documents{status="queued"} 1.0' in text and 'quire_documents{status="failed"} 0.0' in text
    assert "quire_pages_per_second 0.0" in text
    assert 'quire_queue_depth{queue="cpu"} 3.0' in text
    assert "quire_engine_blocks_used 12.0" in text and "quire_engine_prefix_hit_tokens_total 640.0" in text


def test_readyz_names_a_database_that_does_not_exist_by_its_stable_code(settings: Settings) -> None:
    missing = settings.model_copy(
        update={"database_url": "postgresql+psycopg://postgres@127.0.0.1:5432/quire_no_such_database"})
    with TestClient(create_app(missing, RecordingDispatcher(), tenant="acme")) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith('database: database_missing: postgresql+psycopg://postgres@127.0.0.1:5432/'
                              'quire_no_such_database: database "quire_no_such_database" does not exist. Create it')
