"""Blob store: uploaded files and page images by content address (the SHA-256 of their bytes).

Content addressing makes writes idempotent (a re-delivered task stores the same key again), makes same-content
uploads share one blob, and lets a key be checked against its bytes. `BlobStore` is the interface the API and
workers use; `LocalBlobStore` keeps blobs in a directory, one machine's or a shared one, and `S3BlobStore`
(pipeline/s3_storage.py) in an S3-compatible bucket, for API and workers on machines that share no disk.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, Protocol

CHUNK_BYTES = 1 << 20
_KEY = re.compile(r"[0-9a-f]{64}")


class BlobTooLarge(Exception):
    """The stream passed max_bytes; nothing was stored. `code` is the stable error code the API reports."""

    code = "file_too_large"

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the upload is larger than the limit of {max_bytes} bytes")
        self.max_bytes = max_bytes


class InvalidBlobKey(ValueError):
    """A key that is not a lowercase SHA-256 hex digest: refused before it can name any path."""


class BlobNotFound(FileNotFoundError):
    """No blob under this key."""


class BlobStoreUnavailable(RuntimeError):
    """The store cannot be used (a bucket that does not answer, refuses us or does not exist; a directory that cannot
    be written); `code` is stable, for logs and /readyz, and the message says what to fix."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class StoredBlob:
    key: str  # SHA-256 hex digest of the bytes
    size: int


class BlobWriter(Protocol):
    """One blob being written: chunks go in as they arrive; nothing is visible under a key until commit.

    `finish` ends the writing and tells the key (so a caller can, say, look the content up in a database) before
    `commit` makes the blob visible; `abort` throws the bytes away and is a no-op after commit.
    """

    def write(self, chunk: bytes) -> None:
        """Append chunk; raises BlobTooLarge (having aborted) past the writer's max_bytes."""
        ...

    def finish(self) -> StoredBlob:
        """No more writes: the bytes are durable (not yet visible); their key and size."""
        ...

    def commit(self) -> StoredBlob:
        """Finish if needed, then make the blob visible under its key."""
        ...

    def abort(self) -> None:
        ...


class BlobTally:
    """What every BlobWriter keeps of the bytes that pass through it: how many (held to max_bytes) and their SHA-256,
    which becomes the key. One class, so that both stores count, refuse and name a blob the same way."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._digest = hashlib.sha256()

    def add(self, chunk: bytes) -> None:
        """Count and hash chunk; raises BlobTooLarge, without hashing it, once the count passes max_bytes."""
        self.size += len(chunk)
        if self.max_bytes is not None and self.size > self.max_bytes:
            raise BlobTooLarge(self.max_bytes)
        self._digest.update(chunk)

    def blob(self) -> StoredBlob:
        """The key and size of the bytes counted so far."""
        return StoredBlob(self._digest.hexdigest(), self.size)


def write_all(writer: BlobWriter, chunks: Iterable[bytes]) -> StoredBlob:
    """Every chunk through `writer`, then commit; whatever fails on the way leaves nothing behind (abort)."""
    try:
        for chunk in chunks:
            writer.write(chunk)
        return writer.commit()
    finally:
        writer.abort()


class BlobStore(Protocol):
    """Where the service keeps bytes. Keys are SHA-256 hex digests of the content; a put is idempotent."""

    def put(self, data: bytes) -> str:
        """Store data; its key."""
        ...

    def put_stream(self, chunks: Iterable[bytes], max_bytes: int | None = None) -> StoredBlob:
        """Store the chunks, hashing as they arrive; raises BlobTooLarge past max_bytes, storing nothing."""
        ...

    def writer(self, max_bytes: int | None = None) -> BlobWriter:
        """An incremental put, for a caller that receives bytes over time and decides late whether to keep them."""
        ...

    def open(self, key: str) -> BinaryIO:
        """A binary file object to read the blob from; raises BlobNotFound."""
        ...

    def get(self, key: str) -> bytes:
        """The blob's bytes; raises BlobNotFound."""
        ...

    def exists(self, key: str) -> bool:
        ...

    def delete(self, key: str) -> bool:
        """Remove the blob; False when there was none."""
        ...

    def check(self) -> None:
        """Raise BlobStoreUnavailable unless the store can be used now: `quire serve` and workers ask at start,
        /readyz on every call."""
        ...


def check_key(key: str) -> str:
    """key, if it is a lowercase SHA-256 hex digest; anything else (`..`, `/`, empty) raises InvalidBlobKey."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):  # fullmatch: `$` would allow a final newline
        raise InvalidBlobKey(f"not a blob key (64 lowercase hex digits): {key!r}")
    return key


class LocalBlobStore:
    """Blobs as files under root/ab/cd/<key>, written to a temporary file in root/tmp and renamed into place.

    The rename is atomic on one filesystem, so a reader sees either no blob or all of it, never a partial file,
    even if the process dies mid-write; a crash only leaves a stray file in root/tmp.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().resolve()
        self._tmp = self.root / "tmp"
        self._tmp.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        """Where key's blob lives (whether or not it exists); keys are checked, so the path is always under root."""
        check_key(key)
        path = self.root / key[:2] / key[2:4] / key
        if not path.resolve().is_relative_to(self.root):  # a symlinked fan-out directory pointing elsewhere
            raise InvalidBlobKey(f"blob path escapes the store: {key!r}")
        return path

    def put(self, data: bytes) -> str:
        return self.put_stream([data]).key

    def put_stream(self, chunks: Iterable[bytes], max_bytes: int | None = None) -> StoredBlob:
        return write_all(self.writer(max_bytes), chunks)

    def writer(self, max_bytes: int | None = None) -> LocalBlobWriter:
        return LocalBlobWriter(self, max_bytes)

    def open(self, key: str) -> BinaryIO:
        try:
            return self.path(key).open("rb")
        except FileNotFoundError:
            raise BlobNotFound(key) from None

    def get(self, key: str) -> bytes:
        with self.open(key) as blob:
            return blob.read()

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def check(self) -> None:
        if not (self._tmp.is_dir() and os.access(self._tmp, os.W_OK | os.X_OK)):
            raise BlobStoreUnavailable(f"{self.root}: the blob directory cannot be written. Fix its permissions or "
                                       "point QUIRE_BLOB_DIR elsewhere.", "blob_store_unwritable")

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        return True


class LocalBlobWriter:
    """A LocalBlobStore blob in the making: a temporary file in root/tmp, renamed into place by commit."""

    def __init__(self, store: LocalBlobStore, max_bytes: int | None = None) -> None:
        self._store, self._tally = store, BlobTally(max_bytes)
        handle, temporary = tempfile.mkstemp(dir=store.root / "tmp", prefix="upload-")
        self._file = os.fdopen(handle, "wb")
        self._temporary = Path(temporary)
        self._state: Literal["writing", "finished", "committed", "aborted"] = "writing"

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._tally.size

    def write(self, chunk: bytes) -> None:
        self._expect("writing")
        try:
            self._tally.add(chunk)
        except BlobTooLarge:
            self.abort()
            raise
        self._file.write(chunk)

    def finish(self) -> StoredBlob:
        if self._state == "writing":
            self._file.flush()
            os.fsync(self._file.fileno())  # the bytes are on disk before a name points at them
            self._file.close()
            self._state = "finished"
        self._expect("finished", "committed")
        return self._tally.blob()

    def commit(self) -> StoredBlob:
        blob = self.finish()
        if self._state == "finished":
            final = self._store.path(blob.key)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._temporary, final)  # same content under the same key: replacing is harmless
            self._state = "committed"
        return blob

    def abort(self) -> None:
        if self._state in ("writing", "finished"):
            self._file.close()
            self._temporary.unlink(missing_ok=True)
            self._state = "aborted"

    def _expect(self, *states: str) -> None:
        if self._state not in states:
            raise ValueError(f"the blob writer is {self._state}")


def read_chunks(stream: BinaryIO, size: int = CHUNK_BYTES) -> Iterable[bytes]:
    """A file object's bytes in chunks, for put_stream, so an upload never has to be in memory whole."""
    while chunk := stream.read(size):
        yield chunk
