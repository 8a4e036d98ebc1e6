"""The service with its blobs in S3 (tests/fault/conftest.py's `faulty_s3`: `quire serve`, a CPU and a GPU worker,
a bucket of the real radosgw, no shared directory for blobs): the service tests that touch every blob path run on it
as they are, and what only a bucket shows is checked here: the objects a document leaves, a refused upload that
leaves no object and no open multipart upload, and a delete that takes the document's blobs out of the bucket."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests import s3
from tests.fault.conftest import Faulty
from tests.service import test_batches, test_documents
from tests.service.test_documents import one_page_pdf, upload, wait_until_final


def bucket_of(fault: Faulty) -> str:
    return fault.service.env["QUIRE_BLOB_URL"].removeprefix("s3://").partition("/")[0]


def test_a_pdf_uploaded_and_polled_gives_what_quire_process_gives(faulty_s3: Faulty, tiny_checkpoint: Path,
                                                                   engine_host, tmp_path: Path) -> None:
    test_documents.test_a_pdf_uploaded_and_polled_gives_what_quire_process_gives(
        faulty_s3.service, tiny_checkpoint, engine_host, tmp_path)
    assert hashlib.sha256(test_documents.FOUR_PAGES).hexdigest() in s3.blob_keys(bucket_of(faulty_s3))


def test_a_zip_of_five_pdfs_and_a_text_file_is_five_succeeded_documents_and_one_rejected(faulty_s3: Faulty) -> None:
    test_batches.test_a_zip_of_five_pdfs_and_a_text_file_is_five_succeeded_documents_and_one_rejected(
        faulty_s3.service)


def test_an_upload_past_the_limit_is_413_and_leaves_no_object_and_no_open_upload(faulty_s3: Faulty) -> None:
    """Sent chunked, with no length to refuse it by, so the service reads 6 MiB of it into a multipart upload (a
    5 MiB part is up) before the limit trips."""
    bucket, boundary = bucket_of(faulty_s3), "s3limit"
    before = s3.objects(bucket)
    data = b"%PDF-1.7\n" + bytes(8 << 20)

    def body() -> Iterator[bytes]:
        yield (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"\r\n'
               "Content-Type: application/pdf\r\n\r\n").encode()
        for start in range(0, len(data), 1 << 20):
            yield data[start:start + (1 << 20)]
        yield f"\r\n--{boundary}--\r\n".encode()

    response = httpx.post(f"{faulty_s3.service.url}/v1/documents", content=body(), timeout=60,
                          headers={**faulty_s3.service.headers(),
                                   "content-type": f"multipart/form-data; boundary={boundary}"})
    assert (response.status_code, response.json()["error"]["code"]) == (413, "file_too_large")
    assert s3.objects(bucket) == before and s3.open_uploads(bucket) == []


def test_deleting_a_document_takes_its_blobs_out_of_the_bucket(faulty_s3: Faulty) -> None:
    bucket = bucket_of(faulty_s3)
    before = s3.blob_keys(bucket)
    pdf = one_page_pdf("Deleted from the bucket", pages=2)
    document = upload(faulty_s3.service, pdf, "deleted.pdf")
    assert wait_until_final(faulty_s3.service, document["id"])["status"] == "succeeded"
    added = s3.blob_keys(bucket) - before
    assert hashlib.sha256(pdf).hexdigest() in added and len(added) >= 4  # the upload, 2 page images, the results
    response = httpx.delete(f"{faulty_s3.service.url}/v1/documents/{document['id']}",
                            headers=faulty_s3.service.headers(), timeout=10)
    assert response.status_code == 204
    assert s3.blob_keys(bucket) == before
    assert httpx.get(f"{faulty_s3.service.url}/readyz", timeout=10).status_code == 200
