"""A database that refuses connections: every route answers 503 `database_unavailable` with a Retry-After, never a
500, and an upload refused that way is accepted when retried once the database is back.

The refusing database is a real Postgres URL on a port nothing listens on; the database that is back is the
usual SQLite file, under an app that shares the first one's blob directory (as two API processes would).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from pipeline.jobs.context import open_context
from pipeline.storage import LocalBlobStore
from tests.api.conftest import RecordingDispatcher, corpus, stored_files, upload

REFUSING = "postgresql+psycopg://postgres@127.0.0.1:1/quire?connect_timeout=2"
ROUTES = [("get", "/v1/documents"), ("get", "/v1/documents/doc_x"), ("get", "/v1/documents/doc_x/result"),
          ("post", "/v1/documents/doc_x/cancel"), ("delete", "/v1/documents/doc_x"), ("get", "/health")]


@pytest.fixture
def refused(settings: Settings) -> Iterator[TestClient]:
    """The API over a database that refuses every connection, with the good app's blob directory."""
    refusing = settings.model_copy(update={"database_url": REFUSING})
    app = create_app(open_context(refusing, RecordingDispatcher()), tenant="acme")
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def assert_unavailable(response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "database_unavailable"


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_answers_503_with_a_retry_hint(refused: TestClient, method: str, path: str) -> None:
    assert_unavailable(refused.request(method, path))


def test_an_upload_refused_by_the_database_keeps_nothing_and_is_accepted_when_retried(
        refused: TestClient, client: TestClient, dispatcher: RecordingDispatcher, settings: Settings) -> None:
    assert settings.blob_dir is not None
    assert_unavailable(upload(refused, corpus(), key="retry-me"))
    assert stored_files(settings.blob_dir) == []  # the blob waited for its row, which never came
    retried = upload(client, corpus(), key="retry-me")
    assert retried.status_code == 202, retried.text
    assert dispatcher.sent == [("ingest", retried.json()["id"])]


def test_a_blob_kept_by_an_upload_whose_row_never_committed_does_not_block_its_retry(
        client: TestClient, dispatcher: RecordingDispatcher, settings: Settings) -> None:
    """The blob is renamed into place just before the row's transaction commits; if that commit is what the
    database refused, the blob stays, unreferenced, and the retry writes the same bytes over it."""
    assert settings.blob_dir is not None
    orphan = LocalBlobStore(settings.blob_dir).put(corpus())
    retried = upload(client, corpus(), key="retry-me")
    assert retried.status_code == 202, retried.text
    document = client.get(f"/v1/documents/{retried.json()['id']}").json()
    assert dispatcher.sent == [("ingest", document["id"])]
    assert LocalBlobStore(settings.blob_dir).get(orphan) == corpus()
