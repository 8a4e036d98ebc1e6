"""The API's response bodies as pydantic models, so /openapi.json describes what clients get back."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

from api.errors import ErrorDetail

DocumentState = Literal["queued", "processing", "succeeded", "partial", "failed", "canceled"]
PageState = Literal["queued", "processing", "succeeded", "failed"]
Item = TypeVar("Item")


class DocumentAccepted(BaseModel):
    """The answer to an upload: 202 for a new document, 200 for one the upload repeats (same body either way)."""

    id: str
    status: DocumentState
    filename: str
    size: int = Field(description="bytes")
    sha256: str
    created_at: datetime
    status_url: str


class Counts(BaseModel):
    done: int
    total: int | None = Field(description="null while unknown: pages before the document is opened")


class Progress(BaseModel):
    pages: Counts
    regions: Counts = Field(description="regions of the pages laid out so far; done: no longer pending")


class DocumentLinks(BaseModel):
    self: str
    result_json: str
    result_markdown: str


class DocumentStatus(BaseModel):
    id: str
    filename: str
    status: DocumentState
    media_type: str | None = Field(description="detected from the content once the document is opened")
    size: int = Field(description="bytes")
    sha256: str
    page_count: int | None
    options: dict[str, Any] = Field(description="the resolved processing options (the password is never shown)")
    progress: Progress
    error: ErrorDetail | None
    timings_ms: dict[str, float] = Field(description="wall-clock milliseconds per stage, as the result JSON's")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    links: DocumentLinks


class DocumentSummary(BaseModel):
    id: str
    filename: str
    status: DocumentState
    media_type: str | None
    size: int
    page_count: int | None
    error: ErrorDetail | None
    created_at: datetime
    finished_at: datetime | None
    status_url: str


class Listing(BaseModel, Generic[Item]):
    """One page of a listing, newest first (api.queries.newest_first); subclassed to name each in /openapi.json."""

    items: list[Item] = Field(description="newest first")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")


class DocumentList(Listing[DocumentSummary]):
    """The tenant's documents, a page at a time."""


class PageResult(BaseModel):
    """A page object of result.schema.json, plus its number and the page's live status."""

    number: int = Field(description="1-based, as people count pages; `index` is the 0-based index")
    index: int
    status: PageState = Field(description="the page's current state (the result schema only has final ones)")
    error: ErrorDetail | None
    width_px: int | None
    height_px: int | None
    width_pt: float | None
    height_pt: float | None
    dpi: float | None
    rotation: int
    layout: str | None
    layout_reason: str | None = Field(description="why that layout, when not simply the one asked for")
    markdown: str
    timings_ms: dict[str, float]
    regions: list[dict[str, Any]] = Field(description="region objects as in result.schema.json")
    image_url: str


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    problems: list[str] = Field(default_factory=list, description="what did not answer, when not ok")
    notes: list[str] = Field(default_factory=list, description="what runs without harm to readiness: no recognition "
                                                               "model (its regions are skipped), and why")


class DeliveryAttempt(BaseModel):
    """One attempt to deliver one webhook event; an event's attempts share its delivery_id (Quire-Delivery)."""

    delivery_id: str
    event: str = Field(description="document.succeeded | document.partial | document.failed | document.canceled | "
                                   "batch.finished")
    url: str
    attempt: int = Field(description="1 for the first try, then 2, 3, …")
    status_code: int | None = Field(description="the receiver's answer; null when there was none")
    error: str | None = Field(description="why the attempt failed; null when it succeeded or is not made yet")
    succeeded: bool
    duration_ms: float | None
    next_attempt_at: datetime | None = Field(description="when the retry that follows this attempt is due; null: none")
    attempted_at: datetime | None = Field(description="null while the attempt is scheduled and not made yet")
    created_at: datetime


class DeliveryList(BaseModel):
    items: list[DeliveryAttempt] = Field(description="newest first")
