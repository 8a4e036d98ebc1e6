"""Accepting an upload as a document, and deleting a document with the blobs no one else uses.

Blobs are content-addressed and shared: two documents with the same bytes, or two pages that render the same,
point at one blob. So an upload that makes its blob visible and a delete that removes a blob nobody references
must not interleave, or the delete can remove the bytes a just-accepted document needs. Both take a per-blob lock
inside their transaction: on SQLite every write transaction already holds the database's write lock (BEGIN
IMMEDIATE), on Postgres it is a transaction-scoped advisory lock keyed by the blob. An upload renames its blob into
place while holding the lock and before its row commits; a delete checks references and removes files while
holding it, after the document's rows are gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.config import Settings
from pipeline.db.models import Document, Page, shown_options
from pipeline.db.session import session_scope
from pipeline.jobs.options import DocumentOptions
from pipeline.storage import BlobStore, BlobWriter, StoredBlob
from pipeline.webhooks import accept_callback_url

_LOCK_NAMESPACE = 0x51554952  # "QUIR": the first key of the two-key advisory locks on blobs
_KEYS_PER_TRANSACTION = 100  # blob locks held at once by a delete (Postgres's lock table is shared and finite)


class IdempotencyConflict(Exception):
    """The tenant used this Idempotency-Key before for a different request (other bytes, name or options)."""

    code = "idempotency_conflict"

    def __init__(self, key: str, document_id: str) -> None:
        super().__init__(f"the Idempotency-Key {key!r} was used for another request (document {document_id})")
        self.document_id = document_id


@dataclass(frozen=True)
class Accepted:
    document: Document  # detached, readable
    created: bool  # False: an idempotent replay or a duplicate of an existing document; do not start it


@dataclass(frozen=True)
class _Upload:
    tenant: str
    filename: str
    blob: StoredBlob
    options: dict[str, Any]  # resolved
    dedup_key: str
    idempotency_key: str | None
    batch_id: str | None


def accept_upload(db: Engine, settings: Settings, tenant: str, filename: str, writer: BlobWriter,
                  options: DocumentOptions, idempotency_key: str | None = None,
                  batch_id: str | None = None) -> Accepted:
    """Keep the written blob and record its document, or find the document this upload repeats.

    An Idempotency-Key the tenant used before returns that key's document when the request is the same and raises
    IdempotencyConflict when it is not. Otherwise the same tenant, bytes and resolved options return the existing
    document (the unique dedup key settles concurrent identical uploads). The caller starts a created document only,
    after this returns (the row is committed by then). The writer is committed unless this raises; then the caller
    aborts it. With `batch_id` the document is that batch's, and repeats only the batch's own
    documents (see DocumentOptions.dedup_key). A callback URL Quire will not call raises CallbackRefused.
    """
    if options.callback_url is not None:
        accept_callback_url(options.callback_url, settings.webhook_allow)
    blob = writer.finish()
    resolved = options.resolved(settings)
    upload = _Upload(tenant, filename, blob, resolved.model_dump(), resolved.dedup_key(tenant, blob.key, batch_id),
                     idempotency_key, batch_id)
    with session_scope(db) as session:
        lock_blobs(session, [blob.key])
        existing = _existing(session, upload)
        document, created = (existing, False) if existing is not None else _insert(session, upload)
        writer.commit()  # under the lock, before the row commits: a delete cannot slip in between
    return Accepted(document, created)


def delete_document(db: Engine, blobs: BlobStore, tenant: str, document_id: str) -> bool:
    """Delete the tenant's document (its pages and regions cascade) and every blob of it no other row references;
    False when the tenant has no such document. A crash between the two steps leaves unreferenced blobs, never a
    row without its blob."""
    with session_scope(db) as session:
        found = session.scalars(select(Document.id).where(Document.id == document_id, Document.tenant == tenant))
        if found.one_or_none() is None:
            return False
        keys = _blob_keys(session, document_id)
        session.execute(delete(Document).where(Document.id == document_id))
    ordered = sorted(keys)  # every transaction locks in key order, so two deletes never deadlock
    for start in range(0, len(ordered), _KEYS_PER_TRANSACTION):
        _delete_unreferenced(db, blobs, ordered[start:start + _KEYS_PER_TRANSACTION])
    return True


def lock_blobs(session: Session, keys: list[str]) -> None:
    """Hold the blobs' locks until the session's transaction ends (see the module docstring); pass keys sorted."""
    connection = session.connection()  # on SQLite, BEGIN IMMEDIATE: the write lock covers every blob
    if connection.dialect.name == "postgresql":
        for key in keys:
            connection.execute(text("SELECT pg_advisory_xact_lock(:namespace, :key)"),
                               {"namespace": _LOCK_NAMESPACE, "key": int(key[:8], 16) - (1 << 31)})


def _existing(session: Session, upload: _Upload) -> Document | None:
    """The document this upload repeats: by Idempotency-Key first, then by content and options."""
    if upload.idempotency_key is not None:
        replayed = session.scalars(select(Document).where(
            Document.tenant == upload.tenant, Document.idempotency_key == upload.idempotency_key)).one_or_none()
        if replayed is not None:
            if not _same_request(replayed, upload):
                raise IdempotencyConflict(upload.idempotency_key, replayed.id)
            return replayed
    duplicate = session.scalars(select(Document).where(Document.dedup_key == upload.dedup_key)).one_or_none()
    if duplicate is not None and duplicate.status == "canceled":
        duplicate.dedup_key = None  # a canceled document is never the answer; free its key for the new one
        session.flush()
        return None
    return duplicate


def _insert(session: Session, upload: _Upload) -> tuple[Document, bool]:
    """A new queued document; a concurrent twin that committed first (a unique key says so) is returned instead."""
    document = Document(tenant=upload.tenant, filename=upload.filename, sha256=upload.blob.key,
                        size_bytes=upload.blob.size, options=upload.options, dedup_key=upload.dedup_key,
                        idempotency_key=upload.idempotency_key, batch_id=upload.batch_id, status="queued")
    try:
        with session.begin_nested():
            session.add(document)
    except IntegrityError:
        twin = _existing(session, upload)
        if twin is None:
            raise
        return twin, False
    return document, True


def _same_request(document: Document, upload: _Upload) -> bool:
    """Same bytes, name and options; the password is left out because finalize erases it from the stored options."""
    def comparable(options: dict[str, Any]) -> dict[str, Any]:
        return shown_options(options)

    return (document.sha256 == upload.blob.key and document.filename == upload.filename
            and comparable(document.options) == comparable(upload.options))


def _blob_keys(session: Session, document_id: str) -> set[str]:
    document = session.get_one(Document, document_id)
    pages = session.scalars(select(Page.image_key).where(Page.document_id == document_id,
                                                         Page.image_key.is_not(None)))
    return {key for key in (document.sha256, document.markdown_key, document.result_key, *pages) if key}


def _delete_unreferenced(db: Engine, blobs: BlobStore, keys: list[str]) -> None:
    with session_scope(db) as session:
        lock_blobs(session, keys)
        for key in set(keys) - set(_referenced(session, keys)):
            blobs.delete(key)


def _referenced(session: Session, keys: list[str]) -> Iterator[str]:
    """Those of keys that any document (of any tenant: blobs are shared) or page still points at."""
    for column in (Document.sha256, Document.markdown_key, Document.result_key):
        yield from session.scalars(select(column).where(column.in_(keys)))
    yield from session.scalars(select(Page.image_key).where(Page.image_key.in_(keys)))
