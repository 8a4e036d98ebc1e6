"""Blob store: uploaded files and page images by content address (the SHA-256 of their bytes).

Content addressing makes writes idempotent (a re-delivered task stores the same key again), makes same-content
uploads share one blob, and lets a key be checked against its bytes. `BlobStore` is the interface the API and
workers use; `LocalBlobStore` keeps blobs in a directory, and an S3-compatible store can implement the same
methods later.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

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


@dataclass(frozen=True)
class StoredBlob:
    key: str  # SHA-256 hex digest of the bytes
    size: int


class BlobStore(Protocol):
    """Where the service keeps bytes. Keys are SHA-256 hex digests of the content; a put is idempotent."""

    def put(self, data: bytes) -> str:
        """Store data; its key."""
        ...

    def put_stream(self, chunks: Iterable[bytes], max_bytes: int | None = None) -> StoredBlob:
        """Store the chunks, hashing as they arrive; raises BlobTooLarge past max_bytes, storing nothing."""
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
        digest, size = hashlib.sha256(), 0
        handle, temporary = tempfile.mkstemp(dir=self._tmp, prefix="upload-")
        try:
            with os.fdopen(handle, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if max_bytes is not None and size > max_bytes:
                        raise BlobTooLarge(max_bytes)
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())  # the bytes are on disk before the name points at them
            key = digest.hexdigest()
            final = self.path(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temporary, final)  # same content under the same key: replacing is harmless
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return StoredBlob(key, size)

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

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        return True


def read_chunks(stream: BinaryIO, size: int = CHUNK_BYTES) -> Iterable[bytes]:
    """A file object's bytes in chunks, for put_stream, so an upload never has to be in memory whole."""
    while chunk := stream.read(size):
        yield chunk
