"""A worker killed with SIGKILL mid-document is replaced, and the document still succeeds with every page finished
once (tests/fault/conftest.py's `assert_done_once`), with the blobs in a directory and, for the GPU worker, in
S3."""

from __future__ import annotations

import pytest

from tests.fault.conftest import PAGES, Faulty, assert_done_once, mid_document, wait_for
from tests.service.test_documents import one_page_pdf, upload


@pytest.mark.parametrize("blobs", ["local", "s3"])
def test_a_gpu_worker_killed_mid_document_is_replaced_and_every_page_is_finished_once(
        blobs: str, request: pytest.FixtureRequest) -> None:
    faulty: Faulty = request.getfixturevalue("faulty" if blobs == "local" else "faulty_s3")
    document_id, finished = mid_document(faulty, "The GPU worker dies")
    faulty.kill_worker("gpu")
    faulty.start_worker("gpu")
    faulty.wait_for_workers("gpu")
    assert_done_once(faulty, document_id, finished)


def test_a_cpu_worker_killed_while_rendering_is_replaced_and_every_page_is_finished_once(faulty: Faulty) -> None:
    document = upload(faulty.service, one_page_pdf("The CPU worker dies", pages=PAGES), "cpu.pdf",
                      dpi="300")  # rendering takes a while at 300 dpi
    seen = wait_for(faulty, document["id"], lambda by: len(by.get("queued", [])) in range(1, PAGES - 1))
    faulty.kill_worker("cpu")
    faulty.start_worker("cpu")
    faulty.wait_for_workers("cpu")
    assert_done_once(faulty, document["id"], seen.get("succeeded", []))
