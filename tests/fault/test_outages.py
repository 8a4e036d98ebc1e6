"""Outages of what the service stands on: Redis restarted and Postgres refusing connections mid-document.

Nothing accepted is lost and nothing is done twice (`assert_done_once`); while Postgres is down the API answers
503 `database_unavailable` with a Retry-After (never a 500) and the workers retry instead of dying.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.fault.conftest import PAGES, Faulty, assert_done_once, mid_document
from tests.service.test_documents import one_page_pdf, upload

POSTGRES_DOWN_S = 4
LATER = one_page_pdf("Sent while Postgres is down", pages=PAGES)


def test_documents_succeed_across_a_redis_restart_even_one_uploaded_while_redis_is_down(faulty: Faulty) -> None:
    document_id, finished = mid_document(faulty, "Redis restarts")
    faulty.redis.stop()
    with ThreadPoolExecutor(1) as pool:
        during = pool.submit(upload, faulty.service, one_page_pdf("Sent while Redis is down", pages=PAGES),
                             "during.pdf")
        time.sleep(1.5)
        faulty.redis.start()
        uploaded = during.result(timeout=30)  # the API's send to ingest waited for Redis to come back
    assert_done_once(faulty, document_id, finished)
    assert_done_once(faulty, uploaded["id"], [])
    assert faulty.workers_alive()


def test_while_postgres_refuses_connections_the_api_answers_503_and_the_workers_wait_it_out(faulty: Faulty) -> None:
    document_id, finished = mid_document(faulty, "Postgres goes away")
    faulty.postgres.stop()
    assert faulty.postgres.refuses_connections()
    outage_ends = time.monotonic() + POSTGRES_DOWN_S
    responses = [httpx.get(f"{faulty.service.url}/v1/documents/{document_id}", timeout=10),
                 httpx.post(f"{faulty.service.url}/v1/documents", timeout=10,
                            files={"file": ("down.pdf", LATER)}),
                 httpx.get(f"{faulty.service.url}/readyz", timeout=10)]
    liveness = httpx.get(f"{faulty.service.url}/healthz", timeout=10)
    time.sleep(max(0.0, outage_ends - time.monotonic()))
    faulty.postgres.start()

    api, readiness = responses[:2], responses[2]
    assert [(r.status_code, r.json()["error"]["code"]) for r in api] == [(503, "database_unavailable")] * 2
    assert all(int(r.headers["Retry-After"]) > 0 for r in api)
    assert readiness.status_code == 503 and readiness.json()["status"] == "unavailable"
    assert liveness.status_code == 200  # an orchestrator does not restart the API over a database outage
    assert_done_once(faulty, document_id, finished)
    assert faulty.workers_alive()
    assert faulty.logged("Retry in", "OperationalError"), faulty.service.tail()  # tasks retried, none failed
    assert not faulty.logged('"level": "error"', '"logger": "celery.app.trace"')  # no task failed
    retried = upload(faulty.service, LATER, "down.pdf")  # as the client does after its Retry-After
    assert_done_once(faulty, retried["id"], [])
