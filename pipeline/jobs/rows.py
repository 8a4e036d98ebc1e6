"""Between the pipeline's outputs (results.py) and the database rows that hold them while a document is worked on.

The workers write each region as soon as it is known and finalize reads them all back, so the Markdown and JSON
the service serves come from the same assemble code, over the same values, as `quire process` writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, fields
from typing import Any, TypeVar
from urllib.parse import quote

from sqlalchemy import Row

from pipeline.db.models import Document, Page, Region
from pipeline.documents.results import DocumentOutput, PageOutput, Problem, RegionContent, RegionOutput, Usage

Record = TypeVar("Record", RegionContent, Usage)


def region_row(output: RegionOutput, page_id: int, index: int, crop_px: tuple[int, int, int, int] | None,
               pending: bool = False) -> dict[str, Any]:
    """Every column of one region (for upsert_regions); `pending` marks a region still waiting for the model, whose
    output so far is only its place (any content or error in `output` is not kept)."""
    if pending:
        output = RegionOutput(output.order, output.label, output.score, output.bbox_px, output.bbox_pt, output.task,
                              "none")
    status = "pending" if pending else output.status
    return {
        "page_id": page_id, "index": index, "reading_order": output.order, "label": output.label,
        "score": output.score, "bbox_px": list(output.bbox_px), "bbox_pt": list(output.bbox_pt),
        "crop_px": list(crop_px) if crop_px is not None else None, "task": output.task, "status": status,
        "source": None if pending else output.source, **asdict(output.content), **asdict(output.usage),
        "error_code": output.error.code if output.error else None,
        "error_message": output.error.message if output.error else None,
    }


def region_output(row: Region | Row) -> RegionOutput:
    """A region row (mapped, or plain as the recognize stage reads it) as the pipeline's output; a pending one reads
    as not (yet) recognised."""
    return RegionOutput(
        order=row.reading_order, label=row.label, score=row.score or 0.0, bbox_px=tuple(row.bbox_px),
        bbox_pt=tuple(row.bbox_pt), task=row.task, source=row.source or "none",
        content=from_columns(RegionContent, row), usage=from_columns(Usage, row),
        error=_problem(row.error_code, row.error_message), skipped=row.status == "skipped")


def from_columns(record: type[Record], row: object) -> Record:
    """The record kept in a row's columns of the same names (a Region row, or a RecognitionCache row's content):
    records go in as asdict(record), so this one reading covers every field. A NULL column reads as the field's
    default, so a row written without usage counts no tokens."""
    values = {field.name: getattr(row, field.name) for field in fields(record)}
    return record(**{name: value for name, value in values.items() if value is not None})


def page_output(row: Page) -> PageOutput:
    """A page row and its regions (in the layout's order, as the pipeline lists them) as the pipeline's output."""
    regions = [region_output(region) for region in row.regions]
    status = "failed" if row.status == "failed" else "succeeded"
    return PageOutput(row.index, status, row.width_px, row.height_px, row.width_pt, row.height_pt, row.dpi,
                      row.rotation, row.layout, regions, _problem(row.error_code, row.error_message),
                      dict(row.timings or {}), row.layout_reason)


def document_output(row: Document, status: str) -> DocumentOutput:
    """A document row with all its pages, under the final `status` that finalize decided."""
    return DocumentOutput(row.filename, status, row.sha256, row.media_type, row.size_bytes,  # type: ignore[arg-type]
                          [page_output(page) for page in row.pages], _problem(row.error_code, row.error_message),
                          row.model, dict(row.timings or {}))


def region_image_path(document_id: str, number: int, order: int) -> str:
    """Where the API serves a region's crop (page `number` from 1, the region's `order` as the JSON has it): the
    stored Markdown links its pictures here, so the path must not depend on the host a request came through."""
    return f"/v1/documents/{quote(document_id, safe='')}/pages/{number}/regions/{order}/image"


def picture_links(document_id: str, pages: Iterable[Page]) -> dict[tuple[int, int], str]:
    """MarkdownOptions.pictures for these pages: each picture region with pixels on its page → its crop's path, as
    `quire process` links the crops it saves."""
    return {(page.index, region.reading_order): region_image_path(document_id, page.index + 1, region.reading_order)
            for page in pages for region in page.regions if region.task is None and region.crop_px is not None}


def _problem(code: str | None, message: str | None) -> Problem | None:
    return None if code is None else Problem(code, message or code)
