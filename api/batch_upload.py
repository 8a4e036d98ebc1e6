"""Reading a batch upload as it streams in: several `file` parts that are documents, or one that is an archive.

The form is the one `POST /v1/documents` reads (api/upload.py: the same option fields, the same parser); what
differs is where files go. A file part's first bytes decide: a document goes to a blob writer (committed only when
the batch is accepted), an archive to an anonymous temporary file beside the blobs (where the service has room for
uploads) for pipeline.jobs.batches to read its members from, and anything else is rejected, listed with its reason
while its bytes are dropped as they arrive. A document file may have up to max_upload_bytes (413 past it, as for
one document), the body (and so an archive) up to max_archive_bytes, and the form up to max_archive_members files;
an archive must be the only file of its batch.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

import anyio

from api.errors import ApiError
from api.upload import (
    FILE_FIELD,
    FLUSH_BYTES,
    MAX_PARTS,
    FormPart,
    MultipartForm,
    clean_filename,
    too_large,
    upload_openapi,
)
from pipeline.archives import ArchiveKind, Rejected, archive_kind
from pipeline.config import Settings
from pipeline.documents.source import SNIFF_BYTES
from pipeline.jobs.batches import BatchUpload, SpooledArchive, StagedDocument, unreadable
from pipeline.storage import BlobStore, BlobWriter


@dataclass
class ReceivedBatch:
    upload: BatchUpload  # the caller closes it
    fields: dict[str, list[str]]


@dataclass
class _File:
    part: FormPart
    name: str
    size: int = 0
    target: Literal["document", "archive", "dropped"] | None = None  # None until its first bytes are seen
    kind: ArchiveKind | None = None
    sink: BlobWriter | BinaryIO | None = None  # a document's blob writer, or the archive's temporary file
    done: bool = False


class BatchForm(MultipartForm[ReceivedBatch]):
    """The batch's `file` parts, each sent where its first bytes say (see the module docstring)."""

    def __init__(self, blobs: BlobStore, settings: Settings) -> None:
        super().__init__(settings.max_archive_members + MAX_PARTS)
        assert settings.blob_dir is not None  # Settings fills it in
        self._blobs, self._spool_dir = blobs, settings.blob_dir
        self._max_file_bytes, self._max_files = settings.max_upload_bytes, settings.max_archive_members
        self._files: list[_File] = []
        self._unflushed: list[_File] = []  # files with a sink whose bytes are not all written yet
        self._upload = BatchUpload()

    async def flush(self) -> None:
        """Write each file's collected bytes once they are a batch, or the file is complete."""
        for file in list(self._unflushed):
            pending = file.part.data
            if len(pending) < FLUSH_BYTES and not file.done:
                continue
            if file.sink is None:
                await anyio.to_thread.run_sync(self._open_sink, file)
            if pending:
                batch = bytes(pending)
                pending.clear()
                await anyio.to_thread.run_sync(file.sink.write, batch)
            if file.done:
                if file.target == "document":
                    await anyio.to_thread.run_sync(file.sink.finish)  # closes its file before the next one opens
                self._unflushed.remove(file)

    async def result(self) -> ReceivedBatch:
        self._check_ended()
        if not self._files:
            raise ApiError(422, "missing_file", f"the form has no `{FILE_FIELD}` part")
        await self.flush()
        return ReceivedBatch(self._upload, self.fields())

    async def abort(self) -> None:
        with anyio.CancelScope(shield=True):  # a canceled request (the client left) still removes its bytes
            await anyio.to_thread.run_sync(self._upload.close)

    def _file_data(self, part: FormPart, data: bytes) -> None:
        file = self._file(part)
        file.size += len(data)
        if file.target != "dropped":
            part.data.extend(data)
        if file.target is None and len(part.data) >= SNIFF_BYTES:
            self._classify(file)
        if file.size > self._max_file_bytes and file.target != "archive":  # an archive has the body's limit
            raise too_large(self._max_file_bytes)

    def _file_end(self, part: FormPart) -> None:
        file = self._file(part)  # an empty file part: no data callback ever ran
        file.done = True
        if file.target is None:
            self._classify(file)

    def _file(self, part: FormPart) -> _File:
        if self._files and self._files[-1].part is part:
            return self._files[-1]
        if len(self._files) == self._max_files:
            raise ApiError(422, "archive_too_many_members", f"the batch has more than {self._max_files} files")
        if self._files and self._files[0].target == "archive":  # classified when its part ended, at the latest
            raise _not_alone()
        self._files.append(_File(part, clean_filename(part.filename)))
        return self._files[-1]

    def _classify(self, file: _File) -> None:
        head = bytes(file.part.data[:SNIFF_BYTES])
        kind = archive_kind(head)
        if kind is not None:
            if len(self._files) > 1:
                raise _not_alone()
            file.target, file.kind = "archive", kind
        elif (problem := unreadable(head)) is not None:
            file.target = "dropped"
            file.part.data.clear()
            self._upload.rejected.append(Rejected(file.name, *problem))
            return
        else:
            file.target = "document"
        self._unflushed.append(file)

    def _open_sink(self, file: _File) -> None:
        """Open the file's sink and hand it to the upload at once, on the worker thread: a request canceled while
        this runs still finds it to close."""
        if file.target == "archive":
            assert file.kind is not None
            self._spool_dir.mkdir(parents=True, exist_ok=True)  # with blobs in S3, nothing else makes it
            file.sink = tempfile.TemporaryFile(dir=self._spool_dir, prefix="batch-")
            self._upload.archive = SpooledArchive(file.name, file.kind, file.sink)
        else:
            file.sink = self._blobs.writer(self._max_file_bytes)
            self._upload.documents.append(StagedDocument(file.name, file.sink))


def _not_alone() -> ApiError:
    return ApiError(422, "invalid_batch", "an archive must be the only file of its batch: send documents as files, "
                    "or one archive of them")


def batch_openapi() -> dict[str, Any]:
    """The upload's multipart body (upload_openapi), with `file` repeatable and the callback the batch's."""
    body = upload_openapi()
    properties = body["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    properties[FILE_FIELD] = {
        "type": "array", "items": {"type": "string", "format": "binary"},
        "description": "documents (PDF, TIFF, PNG, JPEG or WebP, sniffed by content), one `file` part each; or one "
                       "zip or tar (plain, gzip, bzip2 or xz) archive of them"}
    properties["callback_url"]["description"] = "called once, when every document of the batch has finished"
    return body
