"""Schemathesis sends requests generated from the OpenAPI schema to every operation: none may answer 5xx.

Bounded (a few examples an operation, no deadline) so it stays a few seconds in the suite; the dispatcher records
instead of starting work, since this is about the API's own answers to odd input."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis.strategies import SearchStrategy
from schemathesis.checks import not_a_server_error

from api.app import create_app
from pipeline.config import Settings
from pipeline.jobs.context import open_context
from tests.api.conftest import RecordingDispatcher, corpus, upload

MAX_EXAMPLES = 15


@pytest.mark.slow
def test_no_operation_answers_a_server_error(settings: Settings) -> None:
    app = create_app(open_context(settings, RecordingDispatcher()), tenant="acme")
    with TestClient(app) as client:
        assert upload(client, corpus()).status_code == 202  # something to find besides 404s
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8
    for operation in operations:
        fuzz(operation.as_strategy())


def fuzz(cases: SearchStrategy) -> None:
    @given(cases)
    @hypothesis_settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                         database=None)
    def no_server_error(case) -> None:
        case.call_and_validate(checks=[not_a_server_error])

    no_server_error()
