"""The local blob store: content addresses, streamed uploads under a size limit, atomic writes, contained keys."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.storage import (
    BlobNotFound,
    BlobStoreUnavailable,
    BlobTooLarge,
    InvalidBlobKey,
    LocalBlobStore,
    StoredBlob,
    read_chunks,
)


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


def test_the_key_is_the_sha256_of_the_content_and_puts_are_idempotent(store: LocalBlobStore) -> None:
    data = b"%PDF-1.7 four pages"
    key = store.put(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert store.put(data) == key
    assert store.get(key) == data and store.exists(key)
    with store.open(key) as blob:
        assert blob.read(4) == b"%PDF"
    assert len(files_under(store.root)) == 1  # same content, one blob


def test_put_stream_hashes_chunks_as_they_arrive(store: LocalBlobStore) -> None:
    data = bytes(range(256)) * 10_000
    stored = store.put_stream(read_chunks(io.BytesIO(data), size=4096), max_bytes=len(data))
    assert stored == StoredBlob(hashlib.sha256(data).hexdigest(), len(data))
    assert store.get(stored.key) == data


def test_a_stream_past_the_limit_is_refused_before_it_is_read_to_the_end(store: LocalBlobStore) -> None:
    read = []

    def upload() -> Iterator[bytes]:
        for _ in range(1000):
            read.append(1)
            yield b"x" * 1024

    with pytest.raises(BlobTooLarge) as refused:
        store.put_stream(upload(), max_bytes=10 * 1024)
    assert refused.value.code == "file_too_large" and "10240 bytes" in str(refused.value)
    assert len(read) == 11  # stopped at the first chunk over the limit
    assert files_under(store.root) == []  # nothing stored, no temporary file left behind


def test_a_blob_appears_only_when_complete(store: LocalBlobStore) -> None:
    """Readers never see a partial blob: the bytes go to a temporary file that is renamed into place at the end."""
    chunks = [b"page one ", b"page two"]
    key = hashlib.sha256(b"".join(chunks)).hexdigest()

    def upload() -> Iterator[bytes]:
        for chunk in chunks:
            yield chunk
            assert not store.exists(key) and not store.path(key).exists()

    assert store.put_stream(upload()).key == key
    assert store.get(key) == b"page one page two"


def test_an_upload_that_fails_midway_leaves_nothing(store: LocalBlobStore) -> None:
    def upload() -> Iterator[bytes]:
        yield b"first half"
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        store.put_stream(upload())
    assert files_under(store.root) == []


@pytest.mark.parametrize("key", ["../../etc/passwd", "/etc/passwd", "ab/../../x", "", "AB" * 32, "a" * 63,
                                 "a" * 64 + "/", "a" * 64 + "\n", "..%2f" * 8])
def test_keys_that_are_not_sha256_digests_are_refused(store: LocalBlobStore, key: str) -> None:
    for use in (store.get, store.exists, store.delete, store.open, store.path):
        with pytest.raises(InvalidBlobKey):
            use(key)


def test_a_symlink_inside_the_store_cannot_lead_out_of_it(store: LocalBlobStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.root / "ab").symlink_to(outside)
    with pytest.raises(InvalidBlobKey, match="escapes"):
        store.get("ab" * 32)


def test_delete_and_missing_blobs(store: LocalBlobStore) -> None:
    key = store.put(b"stamp")
    assert store.delete(key) is True
    assert store.delete(key) is False
    assert not store.exists(key)
    with pytest.raises(BlobNotFound):
        store.get(key)


def test_a_writer_tells_the_key_before_the_blob_is_visible(store: LocalBlobStore) -> None:
    """finish gives the key (a caller looks the content up before keeping it); only commit makes the blob appear."""
    writer = store.writer(max_bytes=100)
    writer.write(b"%PDF-1.7 ")
    writer.write(b"page one")
    blob = writer.finish()
    assert blob == StoredBlob(hashlib.sha256(b"%PDF-1.7 page one").hexdigest(), 17)
    assert not store.exists(blob.key)
    assert writer.commit() == blob and writer.commit() == blob  # committing twice is harmless
    writer.abort()  # a no-op once committed
    assert store.get(blob.key) == b"%PDF-1.7 page one"
    assert [path.parent.name for path in files_under(store.root)] == [blob.key[2:4]]  # no temporary file


def test_an_aborted_writer_leaves_nothing(store: LocalBlobStore) -> None:
    writer = store.writer()
    writer.write(b"the first half")
    writer.finish()
    writer.abort()
    writer.abort()
    assert files_under(store.root) == []
    with pytest.raises(ValueError, match="aborted"):
        writer.commit()


def test_a_writer_past_its_limit_aborts_itself(store: LocalBlobStore) -> None:
    writer = store.writer(max_bytes=10)
    writer.write(b"x" * 10)
    with pytest.raises(BlobTooLarge):
        writer.write(b"x")
    assert files_under(store.root) == []
    with pytest.raises(ValueError, match="aborted"):
        writer.write(b"x")


def test_check_names_a_blob_directory_that_cannot_be_written(store: LocalBlobStore) -> None:
    store.check()
    (store.root / "tmp").rmdir()
    (store.root / "tmp").write_bytes(b"not a directory")  # as root, permissions would not stop a write
    with pytest.raises(BlobStoreUnavailable, match="cannot be written") as unwritable:
        store.check()
    assert unwritable.value.code == "blob_store_unwritable"
