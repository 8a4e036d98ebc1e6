"""A burst of small documents on the distributed service (the CI-sized cut of benchmarks/load.py): every one
succeeds with each of its regions recognised by the engine, and the GPU worker's resident memory after the burst
stays within 10% of what it was after a warm-up (issue 8's leak bound; the benchmark checks it over 500+
engine requests)."""

from __future__ import annotations

import asyncio

import httpx

from benchmarks.workload import generated_pdf
from tests.process_tree import tree_rss_kib
from tests.service.conftest import Service
from tests.service.test_documents import result, wait_until_final

DOCUMENTS, CLIENTS, WARM_UP, PARAGRAPHS = 40, 10, 5, 3
MAX_GROWTH = 0.10


def upload_all(service: Service, names: list[str]) -> list[str]:
    """POST a PDF per name, CLIENTS at a time; the document ids (every upload must be accepted)."""

    async def run() -> list[str]:
        gate = asyncio.Semaphore(CLIENTS)
        async with httpx.AsyncClient(base_url=service.url, headers=service.headers(), timeout=60) as client:

            async def one(name: str) -> str:
                data = generated_pdf(name, paragraphs=PARAGRAPHS)
                async with gate:
                    response = await client.post("/v1/documents", files={"file": (name, data)})
                assert response.status_code == 202, response.text
                return response.json()["id"]

            return await asyncio.gather(*(one(name) for name in names))

    return asyncio.run(run())


def run_burst(service: Service, label: str, count: int) -> list[dict]:
    ids = upload_all(service, [f"{label} document {i}" for i in range(count)])
    return [wait_until_final(service, document_id, timeout_s=180) for document_id in ids]


def test_forty_documents_from_ten_clients_all_succeed_and_the_gpu_worker_does_not_grow(distributed, processes):
    gpu = next(process for process in processes if process.args[3:6] == ["worker", "--queues", "gpu"])
    warm = run_burst(distributed, "warm-up", WARM_UP)
    assert {status["status"] for status in warm} == {"succeeded"}, distributed.tail()
    before = tree_rss_kib(gpu.pid)
    statuses = run_burst(distributed, "load", DOCUMENTS)
    after = tree_rss_kib(gpu.pid)
    assert {status["status"] for status in statuses} == {"succeeded"}, distributed.tail()
    pages = [page for status in statuses for page in result(distributed, status["id"], "json").json()["pages"]]
    sources = [region["source"] for page in pages for region in page["regions"]]
    assert sources == ["model"] * (PARAGRAPHS * DOCUMENTS)
    assert after < before * (1 + MAX_GROWTH), f"GPU worker RSS {before} KiB → {after} KiB"
