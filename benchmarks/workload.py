"""The documents the service benchmarks send, and the client side of sending them.

Every generated page carries a few separate paragraphs of text no other page has, so each becomes a region of its
own (the `pdf` layout reads blocks from the PDF) and none is answered from a cache: every region is a request to
the engine. Uploads go through the REST API from a fixed number of concurrent clients, each upload timed.
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pymupdf

FINAL = {"succeeded", "partial", "failed", "canceled"}
PARAGRAPH_Y = (90, 330, 570)  # far apart, so the `pdf` layout keeps each paragraph a region of its own


def generated_pdf(name: str, pages: int = 1, paragraphs: int = 3) -> bytes:
    """A Letter-size PDF whose every paragraph says `name`, its page and its place: text found nowhere else."""
    document = pymupdf.open()
    for page_number in range(1, pages + 1):
        page = document.new_page(width=612, height=792)
        for slot, y in enumerate(PARAGRAPH_Y[:paragraphs], 1):
            page.insert_text((72, y), f"{name} page {page_number} paragraph {slot}", fontsize=20)
            page.insert_text((72, y + 28), f"checksum {zlib.crc32(f'{name}/{page_number}/{slot}'.encode()):08x}",
                             fontsize=20)
    data = document.tobytes()
    document.close()
    return data


@dataclass(frozen=True)
class Uploaded:
    name: str
    document_id: str
    latency_s: float


async def _upload_all(url: str, documents: list[tuple[str, bytes]], clients: int) -> list[Uploaded]:
    """POST every document, `clients` at a time; an answer other than 202 raises."""
    pending: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
    for item in documents:
        pending.put_nowait(item)
    done: list[Uploaded] = []

    async def client(http: httpx.AsyncClient) -> None:
        while not pending.empty():
            name, data = pending.get_nowait()
            started = time.perf_counter()
            response = await http.post("/v1/documents", files={"file": (name, data, "application/pdf")})
            if response.status_code != 202:
                raise RuntimeError(f"upload of {name} answered {response.status_code}: {response.text}")
            done.append(Uploaded(name, response.json()["id"], time.perf_counter() - started))

    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return done


def upload_all(url: str, documents: list[tuple[str, bytes]], clients: int) -> list[Uploaded]:
    """Upload (name, bytes) pairs from `clients` concurrent clients; each one's id and upload latency."""
    return asyncio.run(_upload_all(url, documents, clients))


def wait_until_final(url: str, ids: Iterable[str], timeout_s: float, poll_s: float = 0.5) -> dict[str, dict]:
    """The summaries of documents `ids` once every one is final, read from the listing (a request per 200
    documents per poll, rather than one per document, so polling does not load the machine it measures)."""
    wanted, deadline = set(ids), time.monotonic() + timeout_s
    while True:
        summaries = {item["id"]: item for item in _listing(url, wanted)}
        if len(summaries) == len(wanted) and all(item["status"] in FINAL for item in summaries.values()):
            return summaries
        if time.monotonic() > deadline:
            unfinished = sorted(i for i in wanted if summaries.get(i, {}).get("status") not in FINAL)
            raise TimeoutError(f"{len(unfinished)} documents not final after {timeout_s} s: {unfinished[:5]}")
        time.sleep(poll_s)


def _listing(url: str, wanted: set[str]) -> list[dict[str, Any]]:
    """The listing's items of the wanted documents, newest first; paging stops once all are seen, so a soak's polls
    cost the same at its end as at its start, not a request per 200 documents it has uploaded so far."""
    items, cursor = [], None
    while True:
        params = {"limit": 200} | ({"cursor": cursor} if cursor else {})
        page = httpx.get(f"{url}/v1/documents", params=params, timeout=30).json()
        items.extend(item for item in page["items"] if item["id"] in wanted)
        cursor = page["next_cursor"]
        if cursor is None or len(items) == len(wanted):
            return items


def finished_at(summary: dict[str, Any]) -> float:
    """When the service recorded the document final, as a Unix time (what `time.time()` compares with)."""
    return datetime.fromisoformat(summary["finished_at"]).timestamp()


def result_counts(url: str, document_id: str) -> tuple[int, int]:
    """(pages, regions the model recognised) in a finished document's JSON result."""
    result = httpx.get(f"{url}/v1/documents/{document_id}/result", params={"format": "json"}, timeout=30).json()
    return len(result["pages"]), model_regions(result["pages"])


def page_errors(url: str, document_id: str) -> list[str]:
    """Why a finished document's pages failed: `page N: code: message` for each failed page."""
    response = httpx.get(f"{url}/v1/documents/{document_id}/result", params={"format": "json"}, timeout=30)
    if response.status_code != 200:
        return [f"no result: {response.status_code} {response.text}"]
    return [f"page {page['index'] + 1}: {page['error']['code']}: {page['error']['message']}"
            for page in response.json()["pages"] if page.get("error")]


def model_regions(pages: list[dict[str, Any]]) -> int:
    """Regions whose content came from the engine (not a cache, the text layer, or nothing)."""
    return sum(1 for page in pages for region in page["regions"] if region["source"] == "model")


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least `share` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]
