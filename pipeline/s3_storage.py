"""The blob store on an S3-compatible object store (AWS S3, MinIO, Ceph's radosgw, R2, …), so the API and the
workers on many machines share blobs without sharing a disk.

The same guarantees as LocalBlobStore: a blob's object key is its content address (`prefix/ab/cd/<sha256>`, the
local store's layout, so a blob directory synced into a bucket is a valid store), so a put is idempotent; a reader
never sees part of a blob, because an S3 PUT, CompleteMultipartUpload or CopyObject makes an object appear whole.

A streamed upload cannot know its key until its last byte, so its writer sends the bytes to a temporary object
under `prefix/tmp/` as they arrive, in parts of `part_bytes` once it passes one part (a multipart upload, so the
process never holds a whole upload in memory); `commit` copies it to its key inside the store and deletes the
temporary object. A writer past its limit aborts the multipart upload, so a refused upload leaves no object and no
unfinished upload behind. A process killed mid-upload can leave one; operators expire them with a lifecycle rule
(docs/operations.md).
"""

from __future__ import annotations

import hashlib
import io
import logging
import uuid
from collections.abc import Iterable
from typing import Any, BinaryIO, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from pipeline.s3_location import S3Location
from pipeline.storage import (
    BlobNotFound,
    BlobStoreUnavailable,
    BlobTally,
    BlobTooLarge,
    StoredBlob,
    check_key,
    write_all,
)

log = logging.getLogger(__name__)

MIN_PART_BYTES = 5 << 20  # S3's smallest part but the last
MAX_COPY_BYTES = 5 << 30  # CopyObject's largest source; past it a copy goes part by part
_MISSING = {"404", "NoSuchKey", "NotFound"}
# a pooled connection per concurrent user of the client: the API's threads, a GPU worker's recognize threads
_POOL_CONNECTIONS = 64


class S3BlobStore:
    """Blobs as objects in a bucket under a prefix; credentials, region and endpoint come from the standard AWS
    variables and files (AWS_ENDPOINT_URL for MinIO or Ceph), as every S3 tool reads them."""

    def __init__(self, location: S3Location, part_bytes: int = 8 << 20,
                 addressing_style: Literal["path", "virtual", "auto"] = "path") -> None:
        if part_bytes < MIN_PART_BYTES:
            raise ValueError(f"S3 parts must be at least {MIN_PART_BYTES} bytes (QUIRE_S3_PART_BYTES)")
        self.location, self.part_bytes = location, part_bytes
        session = boto3.session.Session()
        s3 = {"addressing_style": addressing_style}
        self.client: Any = session.client("s3", config=Config(
            s3=s3, max_pool_connections=_POOL_CONNECTIONS, retries={"mode": "standard", "max_attempts": 3}))
        # the readiness probe answers within seconds: one attempt, short timeouts
        self._probe: Any = session.client("s3", config=Config(
            s3=s3, connect_timeout=2, read_timeout=2, retries={"mode": "standard", "max_attempts": 1}))

    @property
    def bucket(self) -> str:
        return self.location.bucket

    def object_key(self, key: str) -> str:
        """The object that holds key's blob; keys are checked before any request is made."""
        check_key(key)
        return f"{self.location.prefix}{key[:2]}/{key[2:4]}/{key}"

    def check(self) -> None:
        """Raise BlobStoreUnavailable, with a stable code and the fix, unless the bucket answers and lets us in."""
        where = self.location.url
        try:
            self._probe.head_bucket(Bucket=self.bucket)
        except NoCredentialsError:
            raise BlobStoreUnavailable(
                f"{where}: no S3 credentials found. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, "
                "or an instance role).", "blob_store_denied") from None
        except ClientError as exc:
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            code = exc.response.get("Error", {}).get("Code", status)
            if status == "404" or code in _MISSING | {"NoSuchBucket"}:
                raise BlobStoreUnavailable(
                    f"{where}: the bucket {self.bucket} does not exist. Create it, or fix QUIRE_BLOB_URL.",
                    "blob_store_missing") from None
            if status in ("401", "403"):
                raise BlobStoreUnavailable(
                    f"{where}: the S3 server refused our credentials ({code}). Check AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, and that they may list, read, write and delete in the bucket.",
                    "blob_store_denied") from None
            raise BlobStoreUnavailable(f"{where}: the S3 server answered {code}.", "blob_store_unreachable") from None
        except BotoCoreError as exc:
            endpoint = self._probe.meta.endpoint_url
            raise BlobStoreUnavailable(
                f"{where}: the S3 endpoint {endpoint} does not answer ({exc}). Start it, or fix AWS_ENDPOINT_URL.",
                "blob_store_unreachable") from None

    def put(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        if len(data) <= MAX_COPY_BYTES:  # one PUT; same content under the same key, so writing again is harmless
            self.client.put_object(Bucket=self.bucket, Key=self.object_key(key), Body=data)
            return key
        return self.put_stream([data]).key

    def put_stream(self, chunks: Iterable[bytes], max_bytes: int | None = None) -> StoredBlob:
        return write_all(self.writer(max_bytes), chunks)

    def writer(self, max_bytes: int | None = None) -> S3BlobWriter:
        return S3BlobWriter(self, max_bytes)

    def open(self, key: str) -> BinaryIO:
        return io.BufferedReader(S3ObjectReader(self.client, self.bucket, self.object_key(key), key), 1 << 20)

    def get(self, key: str) -> bytes:
        with self.open(key) as blob:
            return blob.read()

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.object_key(key))
        except ClientError as exc:
            if _missing(exc):
                return False
            raise
        return True

    def delete(self, key: str) -> bool:
        if not self.exists(key):  # S3's DELETE answers the same whether or not there was an object
            return False
        self.client.delete_object(Bucket=self.bucket, Key=self.object_key(key))
        return True

    def temporary_key(self) -> str:
        """A fresh object key for an upload in progress, apart from every blob's."""
        return f"{self.location.prefix}tmp/upload-{uuid.uuid4().hex}"


class S3BlobWriter:
    """An S3BlobStore blob in the making: a temporary object (a multipart upload past one part), copied to its key
    by commit."""

    def __init__(self, store: S3BlobStore, max_bytes: int | None = None) -> None:
        self._store, self._client, self._tally = store, store.client, BlobTally(max_bytes)
        self._buffer = bytearray()
        self._temporary = store.temporary_key()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
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
        self._buffer += chunk
        while len(self._buffer) >= self._store.part_bytes:
            self._send_part(self._store.part_bytes)

    def finish(self) -> StoredBlob:
        if self._state == "writing":
            bucket = self._store.bucket
            if self._upload_id is None:
                self._client.put_object(Bucket=bucket, Key=self._temporary, Body=bytes(self._buffer))
            else:
                if self._buffer:
                    self._send_part(len(self._buffer))
                self._client.complete_multipart_upload(Bucket=bucket, Key=self._temporary, UploadId=self._upload_id,
                                                       MultipartUpload={"Parts": self._parts})
                self._upload_id = None
            self._buffer = bytearray()
            self._state = "finished"
        self._expect("finished", "committed")
        return self._tally.blob()

    def commit(self) -> StoredBlob:
        blob = self.finish()
        if self._state == "finished":
            bucket, final = self._store.bucket, self._store.object_key(blob.key)
            source = {"Bucket": bucket, "Key": self._temporary}
            if blob.size <= MAX_COPY_BYTES:  # same content under the same key: replacing is harmless
                self._client.copy_object(Bucket=bucket, Key=final, CopySource=source)
            else:
                self._client.copy(source, bucket, final)
            self._client.delete_object(Bucket=bucket, Key=self._temporary)
            self._state = "committed"
        return blob

    def abort(self) -> None:
        """Throw the bytes away: abort the multipart upload, or delete the finished temporary object. A failure
        here is logged, not raised, so it cannot hide the error that made the caller abort."""
        if self._state not in ("writing", "finished"):
            return
        bucket = self._store.bucket
        try:
            if self._upload_id is not None:
                self._client.abort_multipart_upload(Bucket=bucket, Key=self._temporary, UploadId=self._upload_id)
            elif self._state == "finished":
                self._client.delete_object(Bucket=bucket, Key=self._temporary)
        except (BotoCoreError, ClientError) as exc:
            log.warning("an aborted upload could not be removed from s3://%s/%s: %s", bucket, self._temporary, exc)
        self._buffer = bytearray()
        self._state = "aborted"

    def _send_part(self, size: int) -> None:
        bucket = self._store.bucket
        if self._upload_id is None:
            created = self._client.create_multipart_upload(Bucket=bucket, Key=self._temporary)
            self._upload_id = created["UploadId"]
        number = len(self._parts) + 1
        sent = self._client.upload_part(Bucket=bucket, Key=self._temporary, UploadId=self._upload_id,
                                        PartNumber=number, Body=bytes(self._buffer[:size]))
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})
        del self._buffer[:size]

    def _expect(self, *states: str) -> None:
        if self._state not in states:
            raise ValueError(f"the blob writer is {self._state}")


class S3ObjectReader(io.RawIOBase):
    """An object read as a seekable file: one GET streams it from the start, and a read after a seek elsewhere
    opens a ranged GET from there, so a reader that jumps around (an image decoder, a seek to the end for the size)
    fetches only what it reads."""

    def __init__(self, client: Any, bucket: str, object_key: str, key: str) -> None:
        super().__init__()
        self._client, self._bucket, self._object_key = client, bucket, object_key
        self._body: Any = None  # set before the GET, which may raise: close() runs on a half-built reader too
        self._body = self._get(None, key)
        self._position = self._body_position = 0

    def _get(self, start: int | None, key: str | None = None) -> Any:
        ranged = {} if start is None else {"Range": f"bytes={start}-"}
        try:
            answer = self._client.get_object(Bucket=self._bucket, Key=self._object_key, **ranged)
        except ClientError as exc:
            if _missing(exc):
                raise BlobNotFound(key or self._object_key) from None
            raise
        if start is None:
            self._size = int(answer["ContentLength"])
        return answer["Body"]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        if self._position >= self._size:
            return 0
        if self._body is None or self._body_position != self._position:
            if self._body is not None:
                self._body.close()
            self._body, self._body_position = self._get(self._position), self._position
        data = self._body.read(len(buffer))
        buffer[:len(data)] = data
        self._position += len(data)
        self._body_position = self._position
        return len(data)

    def close(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None
        super().close()


def _missing(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    return str(error.get("Code")) in _MISSING
