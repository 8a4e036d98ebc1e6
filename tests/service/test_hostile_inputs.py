"""Hostile uploads (tests/fault/hostile.py) sent all at once beside good documents to the distributed service.

Each hostile one is refused at upload with its documented 4xx code, or ends in the outcome its case allows with
only stable error codes (pipeline/documents/errors.py) on the document and its pages; no document is left
unfinished, every good one succeeds, and afterwards every service process is still running and still processes a
fresh document. The PDF with JavaScript is a valid PDF and succeeds: Quire only parses and renders it with
PyMuPDF, which never executes scripts or actions. This lives beside the other service tests to share their
session's service rather than start another.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import time
from typing import Any

import httpx

from pipeline.documents.errors import ERROR_CODES
from tests.fault.hostile import Hostile, hostile_corpus, text_pdf
from tests.service.conftest import Service
from tests.service.test_documents import FINAL, upload, wait_until_final

DEADLINE_S = 120.0  # every accepted document is final by then, or the test fails (a hang is a failure)
WARM_UP_S = 300.0  # the GPU worker loads its engine on its first recognition, slowly on a busy machine
# What a page may fail with besides the document codes: the page errors the result schema documents.
STABLE_CODES = ERROR_CODES | {"layout_failed", "recognition_failed"}
GOOD = [(f"good-{i}.pdf", text_pdf(f"A good document, number {i}")) for i in range(3)]


def post_all(service: Service, files: list[tuple[str, bytes]]) -> list[httpx.Response]:
    async def post() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=service.url, headers=service.headers(), timeout=60) as client:
            return list(await asyncio.gather(*(client.post("/v1/documents", files={"file": (name, data)})
                                               for name, data in files)))

    return asyncio.run(post())


def wait_all_final(service: Service, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each document's final status, polling them all under one deadline."""
    deadline, final = time.monotonic() + DEADLINE_S, {}
    with httpx.Client(base_url=service.url, headers=service.headers(), timeout=10) as client:
        while len(final) < len(ids) and time.monotonic() < deadline:
            for document_id in set(ids) - set(final):
                status = client.get(f"/v1/documents/{document_id}").json()
                if status["status"] in FINAL:
                    final[document_id] = status
            time.sleep(0.2)
    assert len(final) == len(ids), f"not final after {DEADLINE_S} s: {set(ids) - set(final)}\n{service.tail()}"
    return final


def error_codes(service: Service, status: dict[str, Any]) -> set[str]:
    """The document's error code and every page's (a region's own problem, such as `aspect_ratio`, is not an
    error of its page unless it fails the page)."""
    codes = {status["error"]["code"]} if status["error"] else set()
    result = httpx.get(f"{service.url}/v1/documents/{status['id']}/result", headers=service.headers(), timeout=10)
    assert result.status_code == 200, result.text
    return codes | {page["error"]["code"] for page in result.json()["pages"] if page["error"]}


def check_outcome(service: Service, case: Hostile, status: dict[str, Any]) -> None:
    codes = error_codes(service, status)
    assert status["status"] in case.outcomes, (case.name, status, codes)
    assert codes <= STABLE_CODES, (case.name, codes)
    if status["status"] == "failed":
        assert codes, (case.name, "failed without an error code")
    if case.code is not None:
        assert codes == {case.code}, (case.name, codes)


def test_hostile_uploads_fail_with_stable_codes_and_good_ones_still_succeed(distributed: Service,
                                                                            processes: list[subprocess.Popen]):
    warm_up = upload(distributed, text_pdf("Before the hostile corpus"), "before.pdf")
    assert wait_until_final(distributed, warm_up["id"], timeout_s=WARM_UP_S)["status"] == "succeeded"
    corpus = hostile_corpus()
    responses = post_all(distributed, [(case.name, case.data) for case in corpus] + GOOD)
    accepted: dict[str, Hostile | None] = {}
    for case, response in zip(corpus + [None] * len(GOOD), responses, strict=True):
        if case is not None and case.refused is not None:
            assert (response.status_code, response.json()["error"]["code"]) == case.refused, (case.name, response.text)
        else:
            assert response.status_code == 202, response.text
            accepted[response.json()["id"]] = case
    final = wait_all_final(distributed, list(accepted))
    for document_id, case in accepted.items():
        if case is None:
            assert final[document_id]["status"] == "succeeded", (final[document_id], distributed.tail())
        else:
            check_outcome(distributed, case, final[document_id])
    assert [process.poll() for process in processes] == [None] * len(processes), distributed.tail()
    fresh = upload(distributed, text_pdf("Still working after the hostile corpus"), "after.pdf")
    assert wait_until_final(distributed, fresh["id"], timeout_s=30)["status"] == "succeeded", distributed.tail()


def multipart(filename: bytes, data: bytes) -> tuple[bytes, dict[str, str]]:
    """A multipart body whose file part's Content-Disposition carries `filename` as raw bytes."""
    boundary = b"hostilename"
    body = (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="' + filename + b'"\r\n'
            b"Content-Type: application/pdf\r\n\r\n" + data + b"\r\n--" + boundary + b"--\r\n")
    return body, {"content-type": f"multipart/form-data; boundary={boundary.decode()}"}


HOSTILE_NAMES = [b"caf\xe9 \xff\xfe.pdf", b"\x80\x81\x82.pdf", b"../../etc/passwd", b"..\\..\\windows\\evil.pdf",
                 b"tab\there\x1b[31mred\x07.pdf", b"nul\x00byte.pdf", b"/", b"a" * 1000 + b".pdf"]


def test_hostile_file_names_are_accepted_cleanly_and_stored_safe(distributed: Service):
    """Names that are not UTF-8, hold control characters or path separators, or are very long: the upload is
    accepted or refused with a 4xx (never a 5xx), and a stored name is one printable path component."""
    with httpx.Client(base_url=distributed.url, headers=distributed.headers(), timeout=30) as client:
        for i, name in enumerate(HOSTILE_NAMES):
            body, headers = multipart(name, text_pdf(f"Named upload {i}"))
            response = client.post("/v1/documents", content=body, headers=headers)
            assert response.status_code < 500, (name, response.text)
            if response.status_code >= 400:
                assert response.json()["error"]["code"], (name, response.text)
                continue
            stored = client.get(f"/v1/documents/{response.json()['id']}").json()["filename"]
            assert stored and stored.isprintable() and len(stored) <= 255, (name, stored)
            assert "/" not in stored and "\\" not in stored and stored not in (".", ".."), (name, stored)


def test_an_upload_declaring_more_than_the_limit_is_refused_before_its_body_is_read(distributed: Service):
    """The service's limit is 200 MB: a request that declares more is answered 413 after a few bytes were sent."""
    body, headers = multipart(b"big.pdf", b"%PDF-1.7\n")
    url = httpx.URL(distributed.url)
    connection = http.client.HTTPConnection(url.host, url.port, timeout=30)
    try:  # http.client sends what it is given, so the body can be far shorter than the length it declares
        connection.putrequest("POST", "/v1/documents")
        for name, value in {**headers, **distributed.headers(), "content-length": str(300 * 1024 * 1024)}.items():
            connection.putheader(name, value)
        connection.endheaders(message_body=body)
        response = connection.getresponse()
        assert response.status == 413, response.read()
        assert json.loads(response.read())["error"]["code"] == "file_too_large"
    finally:
        connection.close()
