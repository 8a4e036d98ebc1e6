"""API keys: with keys required every /v1 request needs a valid `Authorization: Bearer` key and acts for the key's
tenant, whose documents are all it can see; without keys every request acts for one fixed tenant. When keys are
required is decided from QUIRE_API_KEYS and the address `quire serve` listens on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from api.app import create_app
from api.auth import is_loopback, keys_required, startup_notice
from pipeline.accounts import create_key, ensure_tenant, revoke_key
from pipeline.config import Settings
from pipeline.db.models import Document, Page
from pipeline.db.session import session_scope
from pipeline.jobs.context import open_context
from pipeline.storage import LocalBlobStore
from tests.api.conftest import RecordingDispatcher, corpus, png, stored_files, upload
from tests.api.test_upload import assert_error


def new_key(db: Engine, tenant: str) -> str:
    with session_scope(db) as session:
        ensure_tenant(session, tenant)
        return create_key(session, tenant).key


@pytest.fixture
def keyed(settings: Settings, dispatcher: RecordingDispatcher) -> Iterator[TestClient]:
    """The API with keys required, and no key sent unless a test sends one."""
    with TestClient(create_app(open_context(settings, dispatcher), require_keys=True)) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def upload_as(client: TestClient, key: str) -> str:
    """The id of the four-page corpus PDF uploaded with key."""
    response = client.post("/v1/documents", files={"file": ("report.pdf", corpus())}, headers=bearer(key))
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_a_request_without_a_key_is_refused_before_its_upload_is_read(keyed: TestClient, db: Engine,
                                                                      settings: Settings) -> None:
    for response in (upload(keyed, corpus()), keyed.get("/v1/documents"), keyed.get("/v1/documents/some-id"),
                     keyed.post("/v1/documents/some-id/cancel"), keyed.delete("/v1/documents/some-id"),
                     keyed.get("/v1/documents", headers={"Authorization": "Basic YWNtZTpzZWNyZXQ="})):
        error = assert_error(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"] == "Bearer" and "Authorization: Bearer" in error["message"]
    with session_scope(db) as session:
        assert session.scalar(select(func.count(Document.id))) == 0
    assert stored_files(settings.blob_dir) == []


def test_an_unknown_malformed_or_revoked_key_is_refused_as_an_invalid_token(keyed: TestClient, db: Engine) -> None:
    revoked = new_key(db, "acme")
    with session_scope(db) as session:
        revoke_key(session, revoked[:15])
    unknown = "qk_000000000000_" + revoked[16:]
    for key in (revoked, unknown, "not-a-key", revoked[:15]):
        response = keyed.get("/v1/documents", headers=bearer(key))
        assert_error(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def test_a_revoked_key_is_refused_from_the_next_request_on(keyed: TestClient, db: Engine) -> None:
    key = new_key(db, "acme")
    assert keyed.get("/v1/documents", headers=bearer(key)).status_code == 200
    with session_scope(db) as session:
        revoke_key(session, key[:15])
    assert_error(keyed.get("/v1/documents", headers=bearer(key)), 401, "unauthorized")


def test_each_key_acts_for_its_tenant_and_sees_only_its_documents(keyed: TestClient, db: Engine,
                                                                   blobs: LocalBlobStore) -> None:
    acme, acme_too, globex = new_key(db, "acme"), new_key(db, "acme"), new_key(db, "globex")
    document_id = upload_as(keyed, acme)
    keyed.headers.update(bearer(acme))
    with session_scope(db) as session:
        assert session.get_one(Document, document_id).tenant == "acme"
        session.add(Page(document_id=document_id, index=0, status="succeeded", image_key=blobs.put(png())))

    other = {"headers": bearer(globex)}
    for path in ("", "/result", "/pages/1", "/pages/1/image"):
        assert_error(keyed.get(f"/v1/documents/{document_id}{path}", **other), 404, "document_not_found")
    assert_error(keyed.post(f"/v1/documents/{document_id}/cancel", **other), 404, "document_not_found")
    assert_error(keyed.delete(f"/v1/documents/{document_id}", **other), 404, "document_not_found")
    assert keyed.get("/v1/documents", **other).json()["items"] == []

    assert keyed.get(f"/v1/documents/{document_id}/pages/1/image").status_code == 200  # globex changed nothing
    assert keyed.get(f"/v1/documents/{document_id}", headers=bearer(acme_too)).json()["status"] == "queued"
    assert [item["id"] for item in keyed.get("/v1/documents").json()["items"]] == [document_id]


def test_the_same_file_from_two_tenants_is_two_documents(keyed: TestClient, db: Engine) -> None:
    assert upload_as(keyed, new_key(db, "acme")) != upload_as(keyed, new_key(db, "globex"))


def test_health_and_the_openapi_document_need_no_key(keyed: TestClient) -> None:
    assert keyed.get("/health").status_code == 200
    spec = keyed.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "401" in spec["paths"]["/v1/documents"]["get"]["responses"]


def test_without_keys_every_request_acts_for_the_fixed_tenant(settings: Settings, db: Engine) -> None:
    with TestClient(create_app(open_context(settings, RecordingDispatcher()))) as client:
        document_id = upload_as(client, "qk_unknown_ignored-when-keys-are-off")
        assert "401" not in client.get("/openapi.json").json()["paths"]["/v1/documents"]["get"]["responses"]
    with session_scope(db) as session:
        assert session.get_one(Document, document_id).tenant == "default"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.20", False), ("example.com", False), ("localhost.evil", False)])
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("mode", "host", "required", "notice"), [
    ("auto", "127.0.0.1", False, "no API keys: listening on 127.0.0.1 only; every request acts as tenant `default`"),
    ("auto", "0.0.0.0", True, "API keys required"),
    ("required", "127.0.0.1", True, "API keys required"),
    ("off", "::1", False, "no API keys: listening on ::1 only"),
    ("off", "0.0.0.0", False, "WARNING: QUIRE_API_KEYS=off while listening on 0.0.0.0: anyone"),
])
def test_keys_are_required_unless_off_or_auto_on_loopback_and_serve_says_which(mode, host, required, notice) -> None:
    assert keys_required(mode, host) is required
    assert startup_notice(mode, host).startswith(notice)
