"""Assemble region results into what people and programs read: Markdown per page and per document, and JSON.

Markdown follows what MinerU and docling users expect: titles become headings, nested as the document sets them
(heading_levels.py), tables stay HTML blocks (Markdown tables cannot span cells), display formulas are `$$…$$`
blocks, pictures are links to their crops (or a comment when none was saved), a paragraph a column break cut is
one again (paragraph_flow.py), and running headers, footers and page numbers are left out so the text flows
across pages. The JSON keeps everything, excluded regions included; its shape is result.schema.json, shipped with the
package so clients can validate against the same file the tests use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.documents.heading_levels import heading_levels, numbered_level
from pipeline.documents.paragraph_flow import run_on, runs_on

if TYPE_CHECKING:  # the results render themselves through this module (results.py imports it)
    from pipeline.documents.results import DocumentOutput, PageOutput, Problem, RegionOutput

SCHEMA_PATH = Path(__file__).with_name("result.schema.json")
SCHEMA_VERSION = 1

# Page furniture: repeated on every page, noise in a flowing text.
EXCLUDED_BY_DEFAULT: frozenset[str] = frozenset({"header", "footer", "number", "header_image", "footer_image"})
_ALT_SPECIAL = re.compile(r"[\\\[\]]")  # escaped in alt text, which brackets delimit
# A skipped region's message: the reason (a loader's message runs to hundreds of characters) is the document's
# `model_error`, said once, not repeated by each of a long document's hundreds of regions.
SKIPPED = "needs the recognition model; the document's model_error says why"


@dataclass(frozen=True)
class MarkdownOptions:
    """`exclude`: labels left out; `pictures`: (page index, region order) → link to the region's saved crop;
    `headings`: (page index, region order) → a heading's level, as the whole document sets it (heading_levels)."""

    exclude: frozenset[str] = EXCLUDED_BY_DEFAULT
    pictures: Mapping[tuple[int, int], str] = field(default_factory=dict)
    headings: Mapping[tuple[int, int], int] = field(default_factory=dict)


def document_markdown(document: DocumentOutput, options: MarkdownOptions | None = None) -> str:
    """The whole document as Markdown; a failed page leaves an HTML comment with its error code."""
    options = _with_headings(document.pages, options or MarkdownOptions())
    parts = []
    for page in document.pages:
        if page.error is not None:
            parts.append(f"<!-- page {page.index + 1} failed: {page.error.code} -->")
        elif markdown := page_markdown(page, options):
            parts.append(markdown)
    return "\n\n".join(parts) + "\n" if parts else ""


def page_markdown(page: PageOutput, options: MarkdownOptions | None = None) -> str:
    """One page as Markdown blocks in reading order; its headings' levels from `options`, else from the page alone."""
    options = _with_headings([page], options or MarkdownOptions())
    blocks: list[str] = []
    last_formula: int | None = None  # index in blocks of the display formula a formula_number would tag
    last_label: str | None = None  # the label of the region the last block came from
    for region in page.regions:
        if region.label in options.exclude or region.error is not None:
            continue
        if region.label == "formula_number" and last_formula is not None and region.content.text:
            blocks[last_formula] = _display_formula(_formula_of(blocks[last_formula]), _tag(region.content.text))
            last_formula = None
            continue
        block = _block(page.index, region, options)
        if not block:
            continue
        if region.label == last_label == "text" and runs_on(blocks[-1], block):  # a column broke the paragraph
            blocks[-1] = run_on(blocks[-1], block)
            continue
        last_formula = len(blocks) if region.label == "display_formula" else None
        last_label = region.label
        blocks.append(block)
    return "\n\n".join(blocks)


def _with_headings(pages: list[PageOutput], options: MarkdownOptions) -> MarkdownOptions:
    return options if options.headings else replace(options, headings=heading_levels(pages))


def _block(page_index: int, region: RegionOutput, options: MarkdownOptions) -> str:
    if region.task is None:
        return _picture(region, options.pictures.get((page_index, region.order)))
    content = region.content
    if content.html is not None:
        return content.html
    if content.latex is not None:
        if not content.latex:
            return ""
        return f"${content.latex}$" if region.label == "inline_formula" else _display_formula(content.latex)
    text = (content.text or "").strip()
    if not text:
        return ""
    if region.label == "doc_title":
        return "# " + " ".join(text.split())
    if region.label == "paragraph_title":
        level = options.headings.get((page_index, region.order)) or numbered_level(text)
        return "#" * level + " " + " ".join(text.split())
    return text


def _picture(region: RegionOutput, link: str | None) -> str:
    """A link to the picture's crop, or a comment where none was saved; the words printed on it (a chart's labels)
    are its alt text, where a reader and a search find them without their breaking into the flow of the text."""
    words = " ".join((region.content.text or "").split())
    if link:
        alt = _ALT_SPECIAL.sub(r"\\\g<0>", words) if words else region.label
        return f"![{alt}]({link})"
    return f"<!-- {region.label}: {words.replace('--', '- -')} -->" if words else f"<!-- {region.label} -->"


def _display_formula(latex: str, tag: str | None = None) -> str:
    body = f"{latex} \\tag{{{tag}}}" if tag else latex
    return f"$$\n{body}\n$$"


def _formula_of(block: str) -> str:
    return block.removeprefix("$$\n").removesuffix("\n$$")


def _tag(number: str) -> str:
    """A formula number as read, "(3.1)", → the \\tag argument "3.1"."""
    return number.strip().strip("()[]").strip()


def document_json(document: DocumentOutput, options: MarkdownOptions | None = None) -> dict[str, Any]:
    """The document as a JSON-ready dict in the shape of result.schema.json."""
    options = _with_headings(document.pages, options or MarkdownOptions())
    return {
        "version": SCHEMA_VERSION,
        "name": document.name,
        "status": document.status,
        "sha256": document.sha256,
        "media_type": document.media_type,
        "size_bytes": document.size_bytes,
        "page_count": len(document.pages),
        "model": document.model,
        "model_revision": document.model_revision,
        "error": _problem(document.error),
        "model_error": _problem(document.model_error),
        "timings_ms": _timings(document.timings_ms),
        "pages": [page_json(page, options) for page in document.pages],
    }


def load_schema() -> dict[str, Any]:
    """result.schema.json, the JSON Schema that document_json's output follows."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def page_json(page: PageOutput, options: MarkdownOptions | None) -> dict[str, Any]:
    return {
        "index": page.index,
        "status": page.status,
        "error": _problem(page.error),
        "width_px": page.width_px,
        "height_px": page.height_px,
        "width_pt": _round(page.width_pt),
        "height_pt": _round(page.height_pt),
        "dpi": _round(page.dpi),
        "rotation": page.rotation,
        "layout": page.layout,
        "layout_reason": page.layout_reason,
        "markdown": page_markdown(page, options),
        "timings_ms": _timings(page.timings_ms),
        "regions": [_region_json(region) for region in page.regions],
    }


def _region_json(region: RegionOutput) -> dict[str, Any]:
    used_model, usage = region.source == "model", region.usage
    return {
        "order": region.order,
        "label": region.label,
        "score": round(region.score, 4),
        "bbox_px": [round(value, 2) for value in region.bbox_px],
        "bbox_pt": [round(value, 2) for value in region.bbox_pt],
        "task": region.task,
        "status": region.status,
        "source": region.source,
        **asdict(region.content),
        "tokens": {"prompt": usage.prompt_tokens, "generated": usage.generated_tokens,
                   "cached": usage.cached_tokens} if used_model else None,
        "timings_ms": {"ttft": round(usage.ttft_ms or 0.0, 1), "decode": round(usage.decode_ms or 0.0, 1)}
        if used_model else None,
        "error": _problem(replace(region.error, message=SKIPPED) if region.skipped and region.error else region.error),
    }


def _problem(problem: Problem | None) -> dict[str, str] | None:
    return None if problem is None else {"code": problem.code, "message": problem.message}


def _timings(timings: Mapping[str, float]) -> dict[str, float]:
    return {stage: round(ms, 1) for stage, ms in timings.items()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
