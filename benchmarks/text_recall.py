"""Does a layout lose text? Every line of a PDF's own text layer, accounted for.

Each file goes through the pipeline as `quire process --layout pdf` runs it (text layer on), with a recognizer that
answers nothing, so no model is needed. Then each line of the PDF's text layer is counted once, as the first of:

- furniture: on a running header, footer or page number, which the Markdown leaves out on purpose;
- model: inside a region sent to the model, whose text will come from there;
- markdown: found in its page's Markdown (letters and digits compared, so spacing, hyphenation and markup aside);
- dropped: none of these: text the Markdown's reader would never see.

Usage: `python -m benchmarks.text_recall FILE… [--layout pdf] [--dpi 200] [--password PW]` (other options, and
the DPI unless given, come from the QUIRE_* settings, as for `quire process`). One JSON object per
file: {"file", "pages", "lines", "markdown", "model", "furniture", "dropped", "dropped_lines"}, the last holding
the first dropped lines as "page N: text". Exit status 1 when any line of any file was dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pymupdf

from pipeline.config import get_settings
from pipeline.document_settings import process_options
from pipeline.documents.assemble import EXCLUDED_BY_DEFAULT, page_markdown
from pipeline.documents.layout import layout_backend
from pipeline.documents.layout_text import TEXT_FLAGS, line_text
from pipeline.documents.recognizer import Recognition, RecognitionTask
from pipeline.documents.results import PageOutput
from pipeline.documents.stream import process_document

SHOWN_DROPPED = 20  # dropped lines listed per file


class Silent:
    """A recognizer that answers every region at once with nothing, so only the layout and text layer are judged."""

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        future: Future[Recognition] = Future()
        future.set_result(Recognition(text="", finish_reason="stop"))
        return future

    def cancel(self, future: Future[Recognition]) -> None:
        """Nothing is ever in flight."""


def text_recall(data: bytes, name: str, layout: str = "pdf", dpi: int | None = None,
                password: str | None = None) -> dict[str, Any]:
    """The counts for one PDF (see the module docstring); a file that fails as a whole reports its error code.
    `dpi`: None for the settings' (QUIRE_DPI)."""
    settings = get_settings()
    chosen = settings.model_copy(update={"dpi": dpi or settings.dpi, "text_layer": "auto"})
    options = process_options(chosen, password=password)
    document = process_document(data, name, Silent(), layout_backend(layout), options)
    counts: dict[str, Any] = {"file": name, "pages": len(document.pages), "lines": 0, "markdown": 0, "model": 0,
                              "furniture": 0, "dropped": 0, "dropped_lines": []}
    if document.error is not None:
        return {**counts, "error": document.error.code}
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        if pdf.needs_pass:
            pdf.authenticate(password or "")
        for page in document.pages:
            markdown = _Normal(page_markdown(page) if page.error is None else "")
            for text, middle in _text_lines(pdf[page.index]):
                kind = _account(text, middle, page, markdown)
                counts["lines"] += 1
                counts[kind] += 1
                if kind == "dropped" and len(counts["dropped_lines"]) < SHOWN_DROPPED:
                    counts["dropped_lines"].append(f"page {page.index + 1}: {text}")
    return counts


def _text_lines(page: pymupdf.Page) -> list[tuple[str, tuple[float, float]]]:
    """Each non-blank line of the page's text layer with its centre in page points."""
    lines = []
    for block in page.get_text("dict", flags=TEXT_FLAGS)["blocks"]:
        for raw in block.get("lines", ()):
            if text := line_text(raw):
                x0, y0, x1, y1 = raw["bbox"]
                lines.append((text, ((x0 + x1) / 2, (y0 + y1) / 2)))
    return lines


class _Normal:
    """Text reduced for comparison: letters and digits, case folded; and every non-space character, for lines of
    symbols alone."""

    def __init__(self, text: str) -> None:
        folded = unicodedata.normalize("NFKC", text).casefold()
        self.alnum = "".join(char for char in folded if char.isalnum())
        self.visible = "".join(folded.split())

    def within(self, other: _Normal) -> bool:
        return self.alnum in other.alnum if self.alnum else self.visible in other.visible


def _account(text: str, middle: tuple[float, float], page: PageOutput, markdown: _Normal) -> str:
    x, y = middle
    holders = [region for region in page.regions
               if region.bbox_pt[0] <= x <= region.bbox_pt[2] and region.bbox_pt[1] <= y <= region.bbox_pt[3]]
    if any(region.label in EXCLUDED_BY_DEFAULT for region in holders):
        return "furniture"
    if any(region.source == "model" for region in holders):
        return "model"
    return "markdown" if _Normal(text).within(markdown) else "dropped"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--layout", default="pdf")
    parser.add_argument("--dpi", type=int, default=None, help="default: QUIRE_DPI, else 200")
    parser.add_argument("--password")
    args = parser.parse_args(argv)
    dropped = 0
    for path in args.files:
        counts = text_recall(path.read_bytes(), path.name, args.layout, args.dpi, args.password)
        dropped += counts["dropped"]
        print(json.dumps(counts, ensure_ascii=False), flush=True)
    return 1 if dropped else 0


if __name__ == "__main__":
    sys.exit(main())
