"""What processing a document produces: per region, per page and per document, before it is written anywhere.

These mirror result.schema.json field for field (assemble.document_json writes them out, and `to_json` and the
`markdown` properties call it, so the result object has what NAME.json has); keep the two in step. assemble.py
knows these classes only as types, so this module imports it and not the other way round.
A region's result is two small records, each defined once here and carried whole from the recognizer to the
database: its content (what the recognition cache keeps) and its usage (what the engine spent on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.documents.assemble import document_json, document_markdown, page_markdown
from pipeline.documents.layout_contract import BBox

# Where a region's content came from: "none" is a picture (or a failure), "cache" a crop recognised before.
RegionSource = Literal["model", "text-layer", "cache", "none"]
RegionStatus = Literal["succeeded", "failed", "skipped"]
PageStatus = Literal["succeeded", "failed"]
# Not `DocumentStatus`: that is the API's whole status body (api/schemas.py); this is only its final value.
DocumentOutcome = Literal["succeeded", "partial", "failed"]


@dataclass(frozen=True)
class Problem:
    """An error code (stable, for machines) and its message (for people)."""

    code: str
    message: str


@dataclass(frozen=True)
class RegionContent:
    """What a region says: the model's output cleaned for the region's task (postprocess), or the PDF's text layer.

    It is all that the recognition cache keeps of a crop, so a hit gives a region what a fresh recognition would.
    The database holds it in columns of the same names (regions, recognition_cache) and the JSON in keys of the same
    names: asdict() writes them and jobs/rows.py's from_columns reads the columns back, so a field added here needs
    only its columns and its place in result.schema.json besides.
    """

    text: str | None = None
    html: str | None = None
    latex: str | None = None
    finish_reason: str | None = None
    truncated: bool = False


@dataclass(frozen=True)
class Usage:
    """What recognising a region took (zero tokens and no timings where the model did not run); stored like
    RegionContent, in the region row's columns of the same names."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float | None = None  # submission to first token: queueing and prefill together
    decode_ms: float | None = None  # first token to last


@dataclass(frozen=True)
class RegionOutput:
    order: int
    label: str
    score: float
    bbox_px: BBox
    bbox_pt: BBox
    task: str | None
    source: RegionSource
    content: RegionContent = RegionContent()
    usage: Usage = Usage()
    error: Problem | None = None
    skipped: bool = False  # needed the model and there was none: `error` says why, and it is no failure

    @property
    def status(self) -> RegionStatus:
        return "skipped" if self.skipped else "failed" if self.error is not None else "succeeded"


@dataclass(frozen=True)
class PageOutput:
    index: int
    status: PageStatus
    width_px: int | None = None
    height_px: int | None = None
    width_pt: float | None = None
    height_pt: float | None = None
    dpi: float | None = None
    rotation: int = 0
    layout: str | None = None
    regions: list[RegionOutput] = field(default_factory=list)
    error: Problem | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    layout_reason: str | None = None  # why `layout` laid the page out when another was asked for

    @property
    def markdown(self) -> str:
        """This page alone as Markdown, as NAME.json's page says it (pictures as comments: no crops are saved)."""
        return page_markdown(self)


@dataclass(frozen=True)
class DocumentOutput:
    name: str
    status: DocumentOutcome
    sha256: str | None = None
    media_type: str | None = None
    size_bytes: int | None = None
    pages: list[PageOutput] = field(default_factory=list)
    error: Problem | None = None
    model: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    model_revision: str | None = None  # the hub commit or weights digest of `model`, once it was loaded

    @property
    def model_error(self) -> Problem | None:
        """Why regions that need the model were skipped (none asked for, or it could not load): one reason for the
        whole document, the first skipped region's; None when no region was skipped."""
        return next((region.error for page in self.pages for region in page.regions
                     if region.skipped and region.error is not None), None)

    @property
    def markdown(self) -> str:
        """The whole document as Markdown, as NAME.md says it (pictures as comments: no crops are saved)."""
        return document_markdown(self)

    def to_json(self) -> dict[str, Any]:
        """The document as NAME.json has it (less `files`), in the shape of result.schema.json."""
        return document_json(self)
