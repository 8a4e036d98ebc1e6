"""What operators watch: /healthz (the process), /readyz (its database, broker and recognition model), and
Prometheus /metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from pipeline.jobs.context import open_context
from tests.api.conftest import RecordingDispatcher, corpus, upload
from tests.workers.checkpoints import REDIS, broken_checkpoint, host_on, own_prefix, remove_weights, status_reader
from workers.embedded import EmbeddedWorkers
from workers.tasks import ModelStatusReporter


@dataclass
class ObservedDispatcher(RecordingDispatcher):
    """A recording dispatcher that also reports queue depths and engine counters, as the embedded workers do;
    these tests are about how /metrics exposes them, not about where they come from."""

    def queue_depths(self) -> dict[str, int]:
        return {"cpu": 3, "gpu": 1}

    def engine_stats(self) -> dict[str, int] | None:
        return {"blocks_used": 12, "prefix_hit_tokens": 640}


def test_healthz_only_needs_the_process_and_readyz_needs_the_database(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "problems": [], "notes": []}
    assert client.get("/readyz").status_code == 200


def test_readyz_is_503_and_names_an_unreachable_broker(settings: Settings) -> None:
    broken = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})  # nothing listens on port 1
    with TestClient(create_app(open_context(broken, RecordingDispatcher()), tenant="acme")) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable" and response.json()["problems"][0].startswith("broker:")


def test_metrics_count_requests_by_route_template_and_show_documents_queues_and_engine(settings: Settings) -> None:
    with TestClient(create_app(open_context(settings, ObservedDispatcher()), tenant="acme")) as client:
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
    with TestClient(create_app(open_context(missing, RecordingDispatcher()), tenant="acme")) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith('database: database_missing: postgresql+psycopg://postgres@127.0.0.1:5432/'
                              'quire_no_such_database: database "quire_no_such_database" does not exist. Create it')


def ready_within(client: TestClient, status_code: int, timeout_s: float = 20.0) -> httpx.Response:
    """/readyz once it answers status_code (the model's verdict arrives after the request that leads to it)."""
    deadline = time.monotonic() + timeout_s
    while (response := client.get("/readyz")).status_code != status_code and time.monotonic() < deadline:
        time.sleep(0.1)
    assert response.status_code == status_code, response.json()
    return response


@pytest.mark.slow
def test_embedded_readyz_is_503_with_the_models_code_once_a_region_finds_it_does_not_load(
        settings: Settings, tiny_checkpoint: Path, tmp_path: Path) -> None:
    host = host_on(broken_checkpoint(tiny_checkpoint, tmp_path, remove_weights), tmp_path)
    served = settings.model_copy(update={"model": host.model, "layout": "pdf", "dpi": 40, "text_layer": "off"})
    workers = EmbeddedWorkers(served, host, 1, 1)
    try:
        with TestClient(create_app(workers.context, tenant="acme")) as client:
            assert client.get("/readyz").status_code == 200  # nothing has tried the model yet
            assert upload(client, corpus()).status_code == 202
            problems = ready_within(client, 503).json()["problems"]
    finally:
        workers.close()
    assert host.status is not None and problems == [f"model: no_weights: {host.status.message}"]
    assert "no model.safetensors" in problems[0]


def test_distributed_readyz_is_503_while_any_gpu_worker_reports_a_model_that_does_not_load(
        settings: Settings, tiny_checkpoint: Path, tmp_path: Path) -> None:
    """Each broken worker fails the regions it takes, so one is enough; alike failures read as one problem."""
    broken = broken_checkpoint(tiny_checkpoint, tmp_path, remove_weights)
    hosts = {"sound": host_on(tiny_checkpoint, tmp_path), "broken-1": host_on(broken, tmp_path),
             "broken-2": host_on(broken, tmp_path)}
    with own_prefix() as prefix:
        brokered = settings.model_copy(update={"broker_url": REDIS})
        app = create_app(open_context(brokered, status_reader(prefix)), tenant="acme")
        reporters = {name: ModelStatusReporter(host, redis.Redis.from_url(REDIS), f"{prefix}{name}")
                     for name, host in hosts.items()}
        with TestClient(app) as client:
            assert client.get("/readyz").status_code == 200  # no GPU worker has reported yet
            for reporter in reporters.values():
                reporter.start()
            problems = ready_within(client, 503).json()["problems"]
            for name in ("broken-1", "broken-2"):
                reporters.pop(name).stop()
            ready_within(client, 200)
            reporters.pop("sound").stop()
    assert problems == [f"model: no_weights: {hosts['broken-1'].check().message}"]
