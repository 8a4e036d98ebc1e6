"""Accepting a batch: many uploaded files, or one archive's members, as the documents of one Batch row.

Nothing of a batch is kept until all of it has been read: each member is streamed into a blob writer that is not
committed yet, so an archive refused part-way (a bomb, too many members, a damaged stream) leaves no batch, no
document and no blob. Then the Batch row is written and every member accepted as a document of it (accept_upload
with the batch's id); the caller starts them afterwards (start_batch), so no document of the batch finishes before
the batch has all of its documents.

A batch's documents repeat only each other (identical members are one document), never documents outside it, so
a batch owns every document it lists and its progress is theirs. Its callback URL is kept on the Batch row and not
on its documents: the batch reports once, when it has finished, rather than once per document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import BinaryIO

from sqlalchemy import Engine

from pipeline.archives import ArchiveKind, ArchiveLimits, Member, Rejected, archive_kind, members
from pipeline.config import Settings
from pipeline.db.models import Batch
from pipeline.db.session import session_scope
from pipeline.documents.source import FORMATS, SNIFF_BYTES, sniff
from pipeline.jobs.intake import accept_upload
from pipeline.jobs.options import DocumentOptions
from pipeline.storage import BlobStore, BlobTooLarge, BlobWriter, read_chunks
from pipeline.webhooks import accept_callback_url


@dataclass
class StagedDocument:
    name: str
    writer: BlobWriter  # every byte written and finished (its file closed), nothing committed


@dataclass
class SpooledArchive:
    name: str
    kind: ArchiveKind
    file: BinaryIO  # an anonymous temporary file holding the archive as uploaded


@dataclass
class BatchUpload:
    """What a batch request brought: files that are documents, or one archive, and the files it rejected. Owns
    their bytes until they are accepted: close() throws away whatever was not (a no-op for committed writers)."""

    documents: list[StagedDocument] = field(default_factory=list)
    archive: SpooledArchive | None = None
    rejected: list[Rejected] = field(default_factory=list)

    def close(self) -> None:
        for staged in self.documents:
            staged.writer.abort()
        if self.archive is not None:
            self.archive.file.close()


class NoDocuments(Exception):
    """Not one of the batch's files is a document Quire reads; nothing was created."""

    code = "no_documents"

    def __init__(self, rejected: list[Rejected]) -> None:
        reasons = "; ".join(f"{item.name}: {item.code}" for item in rejected[:10])
        more = f"; and {len(rejected) - 10} more" if len(rejected) > 10 else ""
        super().__init__(f"the batch has no document Quire reads ({reasons or 'no files'}{more})")


@dataclass(frozen=True)
class AcceptedBatch:
    batch: Batch  # detached, readable
    documents: list[tuple[str, str]]  # (name, document id) for each file taken, in upload order
    created: list[str]  # the documents to start, once this has returned


def accept_batch(db: Engine, blobs: BlobStore, settings: Settings, tenant: str, upload: BatchUpload,
                 options: DocumentOptions) -> AcceptedBatch:
    """Expand the upload's archive, then record the batch and one document per file that is a document.

    Raises CallbackRefused for a callback URL Quire will not call, ArchiveRefused for an archive refused whole and
    NoDocuments when nothing is left to process; nothing is created then. The `options` apply to every document,
    except the callback URL, which is the batch's. Blocking: call it on a worker thread.
    """
    if options.callback_url is not None:
        accept_callback_url(options.callback_url, settings.webhook_allow)
    if upload.archive is not None:
        limits = ArchiveLimits(settings.max_archive_members, settings.max_archive_bytes,
                               settings.max_compression_ratio)
        stage_archive(upload, blobs, limits, settings.max_upload_bytes)
    if not upload.documents:
        raise NoDocuments(upload.rejected)
    per_document = options.model_copy(update={"callback_url": None})
    contents = {staged.writer.finish().key for staged in upload.documents}  # identical members: one document
    shown = per_document.resolved(settings).model_dump(exclude={"password", "callback_url"})
    with session_scope(db) as session:
        batch = Batch(tenant=tenant, document_count=len(contents), options=shown, callback_url=options.callback_url,
                      rejected=[asdict(item) for item in upload.rejected])
        session.add(batch)
    documents, created = [], []
    for staged in upload.documents:
        accepted = accept_upload(db, settings, tenant, staged.name, staged.writer, per_document, batch_id=batch.id)
        documents.append((staged.name, accepted.document.id))
        if accepted.created:
            created.append(accepted.document.id)
    return AcceptedBatch(batch, documents, created)


def stage_archive(upload: BatchUpload, blobs: BlobStore, limits: ArchiveLimits, max_document_bytes: int) -> None:
    """Add the archive's members to the upload, as staged documents or rejections; raises ArchiveRefused (the
    members staged so far stay the upload's, for close() to throw away)."""
    assert upload.archive is not None
    for item in members(upload.archive.file, upload.archive.kind, limits):
        staged = item if isinstance(item, Rejected) else stage_member(item, blobs, max_document_bytes)
        if isinstance(staged, Rejected):
            upload.rejected.append(staged)
        else:
            upload.documents.append(staged)


def stage_member(member: Member, blobs: BlobStore, max_bytes: int) -> StagedDocument | Rejected:
    """The member written to a blob writer when it is a document Quire reads, else why it is not."""
    head = _read_head(member.stream)
    problem = unreadable(head)
    if problem is not None:
        return Rejected(member.name, *problem)
    writer = blobs.writer(max_bytes)
    try:
        writer.write(head)
        for chunk in read_chunks(member.stream):
            writer.write(chunk)
        writer.finish()  # closes the file: an archive's thousand members must not hold a thousand open
    except BlobTooLarge:  # the writer has thrown its bytes away
        return Rejected(member.name, "file_too_large", f"the file is larger than the limit of {max_bytes} bytes")
    except BaseException:
        writer.abort()
        raise
    return StagedDocument(member.name, writer)


def unreadable(head: bytes) -> tuple[str, str] | None:
    """(code, message) for a file whose first bytes show it is not a document Quire reads; None when it is."""
    if not head:
        return "empty", "the file is empty (0 bytes)"
    if sniff(head) is not None:
        return None
    if archive_kind(head) is not None:
        return "unsupported_format", f"the file is an archive; a batch takes documents ({FORMATS}) or one archive"
    return "unsupported_format", f"the file is not {FORMATS}"


def _read_head(stream: BinaryIO) -> bytes:
    head = b""
    while len(head) < SNIFF_BYTES and (chunk := stream.read(SNIFF_BYTES - len(head))):
        head += chunk
    return head
