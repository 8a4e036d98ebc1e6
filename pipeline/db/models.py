"""The service's tables: documents, their pages, the pages' regions, and the region-level recognition cache.

A document row exists before any work starts (the upload is durable first); ingest adds one page row per page,
layout adds one region row per region, recognition fills the region's content. Region results are keyed by
(page_id, index) so a re-delivered task overwrites its own earlier result instead of adding a second one.
Statuses are strings with CHECK constraints rather than native enums: Postgres enums need their own migration
to gain a value, SQLite has none, and the strings are what the API and the JSON result show anyway.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

DOCUMENT_STATUSES = ("queued", "processing", "succeeded", "partial", "failed", "canceled")
FINAL_DOCUMENT_STATUSES = ("succeeded", "partial", "failed", "canceled")  # nothing changes a document after these
PAGE_STATUSES = ("queued", "processing", "succeeded", "failed")
REGION_STATUSES = ("pending", "succeeded", "failed", "skipped")  # skipped: it needed the model and there was none
# Where a region's content came from; "none" is a picture region, which is never recognised (result.schema.json).
REGION_SOURCES = ("model", "text-layer", "cache", "none")

# Explicit names for every constraint and index: migrations can then drop or alter them by name, and SQLite's
# batch mode (which rebuilds tables) needs named constraints to carry them over.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on Postgres (comparable, indexable), plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only makes an INTEGER PRIMARY KEY auto-increment, so the 64-bit key is INTEGER there.
BigID = BigInteger().with_variant(Integer(), "sqlite")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every dialect.

    SQLite stores no offset and hands back naive datetimes, which then cannot be compared with aware ones;
    this stores UTC and always returns an aware UTC value, so code behaves the same on SQLite and Postgres.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: pass an aware one (datetime.now(UTC))")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Document(Base):
    """One uploaded file and the state of its processing; the blob itself lives in the blob store under sha256."""

    __tablename__ = "documents"
    __table_args__ = (
        CheckConstraint(_in("status", DOCUMENT_STATUSES), name="status"),
        UniqueConstraint("tenant", "idempotency_key"),
        UniqueConstraint("dedup_key"),
        Index(None, "tenant", "sha256"),
        Index(None, "tenant", "created_at"),  # the listing, newest first
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=lambda: str(uuid.uuid4()))
    tenant: Mapped[str] = mapped_column(String(128))
    filename: Mapped[str] = mapped_column(String(1024))
    sha256: Mapped[str] = mapped_column(String(64))  # also the blob key of the uploaded bytes
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str | None] = mapped_column(String(64))  # detected at ingest, from the content
    page_count: Mapped[int | None] = mapped_column(Integer)  # known once ingest has opened the file
    status: Mapped[str] = mapped_column(String(16), default="queued")
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    options: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)  # layout, dpi, tasks, callback_url, …
    model: Mapped[str | None] = mapped_column(String(512))  # the recognition model that produced the result
    timings: Mapped[dict[str, float]] = mapped_column(JSONType, default=dict)
    idempotency_key: Mapped[str | None] = mapped_column(String(256))
    batch_id: Mapped[str | None] = mapped_column(ForeignKey("batches.id", ondelete="SET NULL"), index=True)
    # Same tenant, same bytes, same options → the same document; a unique key makes concurrent uploads agree.
    dedup_key: Mapped[str | None] = mapped_column(String(64))
    # Pages in a final state, raised once per page in the transaction that finishes it: the page that brings
    # it to page_count (and only that one) schedules finalize, with no lost update between concurrent pages.
    pages_done: Mapped[int] = mapped_column(Integer, default=0)
    markdown_key: Mapped[str | None] = mapped_column(String(64))  # blob keys of the assembled results
    result_key: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    pages: Mapped[list[Page]] = relationship(
        back_populates="document", order_by="Page.index", cascade="all, delete-orphan", passive_deletes=True
    )


class Page(Base):
    """One page: its rendering (size, dpi, image blob), the layout backend that cut it, and its Markdown."""

    __tablename__ = "pages"
    __table_args__ = (
        CheckConstraint(_in("status", PAGE_STATUSES), name="status"),
        UniqueConstraint("document_id", "index"),
    )

    id: Mapped[int] = mapped_column(BigID, primary_key=True, autoincrement=True)
    document_id: Mapped[str] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)  # 0-based page index in the document
    status: Mapped[str] = mapped_column(String(16), default="queued")
    width_px: Mapped[int | None] = mapped_column(Integer)
    height_px: Mapped[int | None] = mapped_column(Integer)
    width_pt: Mapped[float | None] = mapped_column(Float)
    height_pt: Mapped[float | None] = mapped_column(Float)
    dpi: Mapped[float | None] = mapped_column(Float)
    rotation: Mapped[int] = mapped_column(Integer, default=0)
    image_key: Mapped[str | None] = mapped_column(String(64))  # blob key of the rendered page image
    layout: Mapped[str | None] = mapped_column(String(64))  # the layout backend that found the regions
    layout_reason: Mapped[str | None] = mapped_column(Text)  # why that backend, when not simply the one asked for
    markdown: Mapped[str | None] = mapped_column(Text)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    timings: Mapped[dict[str, float]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    document: Mapped[Document] = relationship(back_populates="pages")
    regions: Mapped[list[Region]] = relationship(
        back_populates="page", order_by="Region.index", cascade="all, delete-orphan", passive_deletes=True
    )


class Region(Base):
    """One layout region and its recognition result; (page_id, index) identifies it across task re-deliveries."""

    __tablename__ = "regions"
    __table_args__ = (
        CheckConstraint(_in("status", REGION_STATUSES), name="status"),
        CheckConstraint(_in("source", REGION_SOURCES), name="source"),
        UniqueConstraint("page_id", "index"),
    )

    id: Mapped[int] = mapped_column(BigID, primary_key=True, autoincrement=True)
    page_id: Mapped[int] = mapped_column(BigID, ForeignKey("pages.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)  # position in the layout's output; stable across retries
    reading_order: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(32))
    score: Mapped[float | None] = mapped_column(Float)  # layout confidence
    bbox_px: Mapped[list[float]] = mapped_column(JSONType)  # [x0, y0, x1, y1] on the rendered image
    bbox_pt: Mapped[list[float]] = mapped_column(JSONType)  # the same box in page points
    crop_px: Mapped[list[int] | None] = mapped_column(JSONType)  # the crop sent to the model, margin included
    task: Mapped[str | None] = mapped_column(String(16))  # ocr | table | formula | chart | seal; None: a picture
    status: Mapped[str] = mapped_column(String(16), default="pending")
    source: Mapped[str | None] = mapped_column(String(16))  # None until there is a result
    text: Mapped[str | None] = mapped_column(Text)
    html: Mapped[str | None] = mapped_column(Text)
    latex: Mapped[str | None] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(16))
    truncated: Mapped[bool] = mapped_column(default=False)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    generated_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    decode_ms: Mapped[float | None] = mapped_column(Float)
    latency_ms: Mapped[float | None] = mapped_column(Float)  # submission to result, as the worker saw it
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    page: Mapped[Page] = relationship(back_populates="regions")


class RecognitionCache(Base):
    """A recognised crop by (tenant, model revision, task, crop content hash): bulk archives repeat letterheads and
    stamps, and an identical crop under the same model and task gives the same greedy output."""

    __tablename__ = "recognition_cache"
    __table_args__ = (UniqueConstraint("tenant", "model_revision", "task", "image_sha256"),)

    id: Mapped[int] = mapped_column(BigID, primary_key=True, autoincrement=True)
    # Per tenant: a hit shows in `source` and in latency, which would tell one tenant what another uploaded.
    tenant: Mapped[str] = mapped_column(String(128))
    model_revision: Mapped[str] = mapped_column(String(512))
    task: Mapped[str] = mapped_column(String(16))
    image_sha256: Mapped[str] = mapped_column(String(64))
    text: Mapped[str | None] = mapped_column(Text)
    html: Mapped[str | None] = mapped_column(Text)
    latex: Mapped[str | None] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(16))
    truncated: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Tenant(Base):
    """A customer: its documents, keys and webhook secret are its own; its id salts the engine's prefix cache."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    webhook_secret: Mapped[str] = mapped_column(String(128))  # HMAC key of Quire-Signature on its deliveries
    callback_url: Mapped[str | None] = mapped_column(String(2048))  # the default webhook target of its documents
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    """A bearer key, stored as the SHA-256 of its secret (keys are long random strings, so a fast hash is enough);
    `prefix` is the key's public start, shown in listings and used to find the row."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=lambda: str(uuid.uuid4()))
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Batch(Base):
    """Many documents submitted together (files or an archive's members); its progress is its documents'."""

    __tablename__ = "batches"
    __table_args__ = (Index(None, "tenant", "created_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=lambda: str(uuid.uuid4()))
    tenant: Mapped[str] = mapped_column(String(128))
    document_count: Mapped[int] = mapped_column(Integer, default=0)
    rejected: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)  # [{name, code, message}]
    options: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    callback_url: Mapped[str | None] = mapped_column(String(2048))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # set once, when its last document is final


class WebhookDelivery(Base):
    """One attempt to deliver one event; the attempts of an event share its delivery_id (Quire-Delivery)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("delivery_id", "attempt"),)

    id: Mapped[int] = mapped_column(BigID, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(String(36), index=True)
    tenant: Mapped[str] = mapped_column(String(128))
    document_id: Mapped[str | None] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), index=True)
    batch_id: Mapped[str | None] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(32))  # document.succeeded | … | batch.finished
    url: Mapped[str] = mapped_column(String(2048))
    attempt: Mapped[int] = mapped_column(Integer)  # 1, 2, …
    status_code: Mapped[int | None] = mapped_column(Integer)  # the receiver's answer; None: no answer
    error: Mapped[str | None] = mapped_column(Text)  # why the attempt failed, when it did
    succeeded: Mapped[bool] = mapped_column(default=False)
    duration_ms: Mapped[float | None] = mapped_column(Float)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # None: no retry follows this one
    # A row is written when its attempt is scheduled (created_at) and completed once the attempt is made; None:
    # not made yet. The row of attempt 1 is written with the event, so the stage that sends it reads it there.
    attempted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


def shown_options(options: dict[str, Any]) -> dict[str, Any]:
    """A document's options as anything but its own processing sees or keeps them: never the PDF's password."""
    return {key: value for key, value in options.items() if key != "password"}
