"""Tenants through API keys on the distributed service (real Postgres, Redis and Celery workers; keys required): a
document is invisible to every other tenant, whatever route asks, and keys made or revoked with `quire keys` on the
shared database take effect on the running API at once."""

from __future__ import annotations

import httpx

from tests.service.conftest import Service
from tests.service.test_documents import one_page_pdf, upload, wait_until_final

ROUTES = ("", "/result", "/pages/1", "/pages/1/image")


def client(service: Service, tenant: str) -> httpx.Client:
    return httpx.Client(base_url=service.url, headers=service.headers(tenant), timeout=10)


def assert_not_found(response: httpx.Response) -> None:
    assert (response.status_code, response.json()["error"]["code"]) == (404, "document_not_found"), response.text


def listed(http: httpx.Client) -> list[str]:
    return [item["id"] for item in http.get("/v1/documents", params={"limit": 200}).json()["items"]]


def test_another_tenants_document_is_not_found_on_any_route_and_not_listed(distributed: Service) -> None:
    document_id = upload(distributed, one_page_pdf("for acme's eyes only"), "acme.pdf")["id"]
    assert wait_until_final(distributed, document_id)["status"] == "succeeded", distributed.tail()
    with client(distributed, "globex") as globex, client(distributed, "acme") as acme:
        for route in ROUTES:
            assert_not_found(globex.get(f"/v1/documents/{document_id}{route}"))
        assert_not_found(globex.post(f"/v1/documents/{document_id}/cancel"))
        assert_not_found(globex.delete(f"/v1/documents/{document_id}"))
        assert document_id not in listed(globex)

        assert [acme.get(f"/v1/documents/{document_id}{route}").status_code for route in ROUTES] == [200] * 4
        assert acme.get(f"/v1/documents/{document_id}").json()["status"] == "succeeded"  # globex changed nothing
        assert document_id in listed(acme)


def test_a_key_works_from_its_creation_until_its_revocation_and_none_works_without_one(distributed: Service) -> None:
    assert "API keys required" in distributed.logs[0].read_text()
    refused = httpx.get(f"{distributed.url}/v1/documents", timeout=10)
    assert (refused.status_code, refused.headers["WWW-Authenticate"]) == (401, "Bearer"), refused.text
    key = distributed.quire("keys", "create", "--tenant", "initech", "--name", "temporary").strip()
    with httpx.Client(base_url=distributed.url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as initech:
        assert initech.get("/v1/documents").json()["items"] == []
        assert "temporary" in distributed.quire("keys", "list", "--tenant", "initech")
        distributed.quire("keys", "revoke", key[:15])
        assert initech.get("/v1/documents").json()["error"]["code"] == "unauthorized"
