"""The service around the endpoints: health, OpenAPI and /docs, and FastAPI's own errors in Quire's error shape."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_upload import assert_error


def test_health_answers_after_asking_the_database(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_openapi_lists_every_route_and_describes_the_multipart_upload(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    routes = {path: sorted(operations) for path, operations in spec["paths"].items()}
    assert {
        "/v1/documents": ["get", "post"],
        "/v1/documents/{document_id}": ["delete", "get"],
        "/v1/documents/{document_id}/result": ["get"],
        "/v1/documents/{document_id}/pages/{number}": ["get"],
        "/v1/documents/{document_id}/pages/{number}/image": ["get"],
        "/v1/documents/{document_id}/cancel": ["post"],
        "/health": ["get"],
    }.items() <= routes.items()
    post = spec["paths"]["/v1/documents"]["post"]
    form = post["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["file"] and form["properties"]["file"]["format"] == "binary"
    assert set(form["properties"]) == {"file", "layout", "dpi", "tasks", "text_layer", "password", "callback_url"}
    assert {"202", "200", "409", "413", "415", "422"} <= set(post["responses"])
    assert post["responses"]["413"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    assert [parameter["name"] for parameter in post["parameters"]] == ["idempotency-key"]
    status = spec["components"]["schemas"]["DocumentStatus"]["properties"]
    assert {"progress", "error", "links", "timings_ms"} <= set(status)
    assert client.get("/docs").status_code == 200


def test_framework_errors_have_the_same_shape(client: TestClient) -> None:
    assert_error(client.get("/v2/nothing"), 404, "not_found")
    response = client.put("/v1/documents")
    assert_error(response, 405, "method_not_allowed")
    assert "POST" in response.headers["allow"]
    error = assert_error(client.post("/v1/documents", headers={"Idempotency-Key": "k" * 300}), 422, "invalid_request")
    assert "idempotency-key" in error["message"]
