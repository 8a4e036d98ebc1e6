"""The S3 blob store against a real S3 server (radosgw, tests/s3.py): the local store's guarantees (content
addresses, idempotent puts, streamed uploads under a limit that leave nothing behind, seekable reads, checked keys)
and its own: multipart uploads past one part, and a check that names what is wrong with a bucket, which stops
`quire serve` and `quire worker` at start and turns /readyz to 503."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from pydantic import ValidationError

from api.app import create_app
from pipeline.blob_url import open_blob_store
from pipeline.config import Settings
from pipeline.db.migrate import upgrade_to_head
from pipeline.jobs.context import open_context
from pipeline.s3_location import S3Location, parse_s3_url
from pipeline.s3_storage import MIN_PART_BYTES, S3BlobStore
from pipeline.storage import BlobNotFound, BlobStoreUnavailable, BlobTooLarge, InvalidBlobKey, StoredBlob
from tests import s3
from tests.api.conftest import RecordingDispatcher
from tests.local_stack import free_port

pytestmark = pytest.mark.slow  # talks to the S3 server

MiB = 1 << 20


@pytest.fixture
def store(s3_bucket: str) -> S3BlobStore:
    return S3BlobStore(S3Location(s3_bucket, "quire/"), part_bytes=MIN_PART_BYTES)


def patterned(size: int) -> bytes:
    """size bytes that differ from part to part, so a part sent twice or out of order would show."""
    return b"".join(hashlib.sha256(str(index).encode()).digest() for index in range(size // 32 + 1))[:size]


def test_the_key_is_the_sha256_of_the_content_and_puts_are_idempotent(store: S3BlobStore) -> None:
    data = b"%PDF-1.7 four pages"
    key = store.put(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert store.put(data) == key
    assert store.get(key) == data and store.exists(key)
    with store.open(key) as blob:
        assert blob.read(4) == b"%PDF"
    assert s3.objects(store.bucket) == [f"quire/{key[:2]}/{key[2:4]}/{key}"]  # the local store's layout


def test_a_stream_past_one_part_goes_up_in_parts_and_reads_back_from_anywhere(store: S3BlobStore) -> None:
    data = patterned(2 * MIN_PART_BYTES + 123_457)
    stored = store.put_stream((data[start:start + MiB] for start in range(0, len(data), MiB)), max_bytes=len(data))
    assert stored == StoredBlob(hashlib.sha256(data).hexdigest(), len(data))
    assert store.get(stored.key) == data
    with store.open(stored.key) as blob:
        assert blob.seek(0, io.SEEK_END) == len(data)  # the size without reading (the API's Content-Length)
        blob.seek(MIN_PART_BYTES - 3)
        assert blob.read(10) == data[MIN_PART_BYTES - 3:MIN_PART_BYTES + 7]  # across a part's edge, by range
        blob.seek(0)
        assert blob.read(5) == data[:5]
    assert s3.blob_keys(store.bucket) == {stored.key} and len(s3.objects(store.bucket)) == 1  # no temporary object
    assert s3.open_uploads(store.bucket) == []


def test_an_image_decodes_straight_from_the_bucket(store: S3BlobStore) -> None:
    png = io.BytesIO()
    Image.new("RGB", (64, 32), (200, 10, 10)).save(png, format="PNG")
    with store.open(store.put(png.getvalue())) as blob, Image.open(blob) as image:
        assert image.size == (64, 32) and image.getpixel((5, 5)) == (200, 10, 10)


def test_an_upload_past_the_limit_aborts_its_multipart_upload_and_leaves_nothing(store: S3BlobStore) -> None:
    seen_open: list[int] = []

    def upload() -> Iterator[bytes]:
        for index in range(8):
            if index == 6:  # five MiB were written: the first part is up, in a multipart upload
                seen_open.append(len(s3.open_uploads(store.bucket)))
            yield patterned(MiB)

    with pytest.raises(BlobTooLarge) as refused:
        store.put_stream(upload(), max_bytes=6 * MiB)
    assert refused.value.code == "file_too_large"
    assert seen_open == [1]
    assert s3.objects(store.bucket) == [] and s3.open_uploads(store.bucket) == []


def test_an_upload_that_fails_midway_leaves_nothing(store: S3BlobStore) -> None:
    def upload() -> Iterator[bytes]:
        yield patterned(MIN_PART_BYTES + 1)
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        store.put_stream(upload())
    assert s3.objects(store.bucket) == [] and s3.open_uploads(store.bucket) == []


def test_a_writer_tells_the_key_before_the_blob_is_visible(store: S3BlobStore) -> None:
    writer = store.writer(max_bytes=100)
    writer.write(b"%PDF-1.7 ")
    writer.write(b"page one")
    blob = writer.finish()
    assert blob == StoredBlob(hashlib.sha256(b"%PDF-1.7 page one").hexdigest(), 17)
    assert not store.exists(blob.key)
    assert writer.commit() == blob and writer.commit() == blob
    writer.abort()  # a no-op once committed
    assert store.get(blob.key) == b"%PDF-1.7 page one"
    assert s3.objects(store.bucket) == [store.object_key(blob.key)]


def test_an_aborted_writer_leaves_nothing_before_or_after_finish(store: S3BlobStore) -> None:
    for finish in (False, True):
        writer = store.writer()
        writer.write(patterned(MIN_PART_BYTES + 10))
        if finish:
            writer.finish()
        writer.abort()
        writer.abort()
        assert s3.objects(store.bucket) == [] and s3.open_uploads(store.bucket) == []
        with pytest.raises(ValueError, match="aborted"):
            writer.commit()


def test_delete_and_missing_blobs(store: S3BlobStore) -> None:
    key = store.put(b"stamp")
    assert store.delete(key) is True
    assert store.delete(key) is False
    assert not store.exists(key)
    with pytest.raises(BlobNotFound):
        store.get(key)
    with pytest.raises(BlobNotFound):
        store.open(key)


@pytest.mark.parametrize("key", ["../../etc/passwd", "", "AB" * 32, "a" * 64 + "\n", "a" * 63 + "/"])
def test_keys_are_refused_before_any_request(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store points at a port where nothing listens: a request would fail otherwise than InvalidBlobKey."""
    for name, value in s3.ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    store = S3BlobStore(S3Location("quire-test", ""))
    for use in (store.get, store.exists, store.delete, store.open, store.object_key):
        with pytest.raises(InvalidBlobKey):
            use(key)


def test_check_names_a_missing_bucket_refused_keys_and_a_silent_endpoint(s3_bucket: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    S3BlobStore(S3Location(s3_bucket, "")).check()
    with pytest.raises(BlobStoreUnavailable, match="does not exist") as missing:
        S3BlobStore(S3Location(f"{s3_bucket}-gone", "")).check()
    assert missing.value.code == "blob_store_missing"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(BlobStoreUnavailable, match="refused our credentials") as denied:
        S3BlobStore(S3Location(s3_bucket, "")).check()
    assert denied.value.code == "blob_store_denied"
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BlobStoreUnavailable, match="does not answer") as silent:
        S3BlobStore(S3Location(s3_bucket, "")).check()
    assert silent.value.code == "blob_store_unreachable"


@pytest.mark.parametrize(("url", "bucket", "prefix"), [("s3://quire", "quire", ""), ("s3://quire/", "quire", ""),
                                                       ("s3://my.bucket-1/a/b/", "my.bucket-1", "a/b/"),
                                                       ("s3://quire//blobs", "quire", "blobs/")])
def test_blob_urls_name_a_bucket_and_a_prefix(url: str, bucket: str, prefix: str) -> None:
    assert parse_s3_url(url) == S3Location(bucket, prefix)


@pytest.mark.parametrize("url", ["quire", "http://quire/x", "s3://", "s3://Upper", "s3://ab", "s3://quire/../x"])
def test_a_malformed_blob_url_stops_the_settings(url: str) -> None:
    with pytest.raises(ValidationError, match="QUIRE_BLOB_URL"):
        Settings(blob_url=url)


def test_the_settings_pick_the_store(tmp_path, s3_bucket: str) -> None:
    assert open_blob_store(Settings(cache_dir=tmp_path)).__class__.__name__ == "LocalBlobStore"
    chosen = open_blob_store(Settings(cache_dir=tmp_path, blob_url=f"s3://{s3_bucket}/p", s3_part_bytes=6 * MiB))
    assert isinstance(chosen, S3BlobStore)
    assert (chosen.location, chosen.part_bytes) == (S3Location(s3_bucket, "p/"), 6 * MiB)


def test_a_worker_stops_at_start_with_one_line_when_the_bucket_is_missing(tmp_path, s3_bucket: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUIRE_")}
    env.update(s3.ENV, QUIRE_CACHE_DIR=str(tmp_path), QUIRE_BROKER_URL="redis://127.0.0.1:6379/0",
               QUIRE_BLOB_URL=f"s3://{s3_bucket}-gone/blobs")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "worker", "--queues", "cpu"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    [error] = [line for line in logged if line["level"] == "error"]
    assert error["code"] == "blob_store_missing" and f"{s3_bucket}-gone does not exist" in error["message"]


def test_the_service_s_context_is_not_built_on_a_bucket_that_cannot_be_used(tmp_path, s3_bucket: str) -> None:
    """`quire serve` (either mode) builds its Context with open_context; the error becomes one line as above."""
    with pytest.raises(BlobStoreUnavailable) as refused:
        open_context(Settings(cache_dir=tmp_path, blob_url=f"s3://{s3_bucket}-gone"), RecordingDispatcher())
    assert refused.value.code == "blob_store_missing"


def test_readyz_reports_a_bucket_that_went_away(tmp_path, s3_bucket: str) -> None:
    client, bucket = s3.client(), f"{s3_bucket}-short-lived"
    client.create_bucket(Bucket=bucket)
    settings = Settings(cache_dir=tmp_path, blob_url=f"s3://{bucket}")
    upgrade_to_head(settings.database_url)
    with TestClient(create_app(open_context(settings, RecordingDispatcher()), tenant="acme")) as api:
        assert api.get("/readyz").status_code == 200
        client.delete_bucket(Bucket=bucket)
        response = api.get("/readyz")
    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith(f"blobs: blob_store_missing: s3://{bucket}/: the bucket {bucket} does not exist")
