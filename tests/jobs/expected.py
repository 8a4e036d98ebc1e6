"""What `quire process` gives for a file, and the form in which the service's results are compared with it.

Timings differ from run to run, and so does the share of a prompt the engine's prefix cache already held; the
comparison leaves exactly those out and keeps everything else: statuses, boxes, labels, text, HTML, LaTeX,
token counts, errors and the Markdown.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.documents.assemble import document_json, document_markdown
from pipeline.documents.layout import layout_backend
from pipeline.documents.outputs import DocumentWriter
from pipeline.documents.recognizer import EngineRecognizer
from pipeline.documents.stream import process_document
from pipeline.engine.engine import Engine
from pipeline.jobs.options import DocumentOptions
from tests.documents.samples import build_pdf, stream_object

PICTURE = re.compile(r"(!\[(?:[^\]\\]|\\.)*\])\(([^)]*)\)")  # ![alt](target), the alt's brackets escaped


def service_settings(cache_dir: Path, model: Path) -> Settings:
    """Fast settings: model-free `pdf` layout, low DPI, no text layer (so every text region goes to the model)."""
    return Settings(model=str(model), cache_dir=cache_dir, max_tokens=4, dpi=40, layout="pdf", text_layer="off")


def processed(data: bytes, name: str, settings: Settings, engine: Engine) -> tuple[dict[str, Any], str]:
    """(JSON, Markdown) of the library pipeline (what `quire process` runs) with the service's default options."""
    options = DocumentOptions().resolved(settings)
    output = process_document(data, name, EngineRecognizer(engine, settings.max_tokens),
                              layout_backend(options.layout), options.for_pipeline(settings), model=settings.model)
    return document_json(output), document_markdown(output)


def written(data: bytes, name: str, settings: Settings, engine: Engine, directory: Path) -> tuple[dict[str, Any], str]:
    """(JSON, Markdown) as `quire process` writes them into `directory`, picture crops under NAME.pages/ included."""
    options = DocumentOptions().resolved(settings)
    writer = DocumentWriter(directory, Path(name).stem)
    writer.start()
    process = replace(options.for_pipeline(settings), page_images=True)
    output = process_document(data, name, EngineRecognizer(engine, settings.max_tokens), layout_backend(options.layout),
                              process, on_page=writer.page, model=settings.model)
    writer.finish(output)
    return json.loads(writer.json_path.read_text(encoding="utf-8")), writer.markdown_path.read_text(encoding="utf-8")


def picture_targets(markdown: str) -> list[str]:
    """Where each picture of the Markdown links, in order."""
    return [match.group(2) for match in PICTURE.finditer(markdown)]


def without_picture_targets(markdown: str) -> str:
    """The Markdown with every picture's link target left out: the service links crops it serves, `quire process`
    the files it saved."""
    return PICTURE.sub(r"\1()", markdown)


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A result JSON without what legitimately varies between runs (timings, prefix-cache hits)."""
    result = {key: value for key, value in result.items() if key != "timings_ms"}
    result["pages"] = [_page(page) for page in result["pages"]]
    return result


def _page(page: dict[str, Any]) -> dict[str, Any]:
    page = {key: value for key, value in page.items() if key != "timings_ms"}
    page["regions"] = [_region(region) for region in page["regions"]]
    return page


def _region(region: dict[str, Any]) -> dict[str, Any]:
    region = {key: value for key, value in region.items() if key != "timings_ms"}
    if region["tokens"] is not None:
        region["tokens"] = {key: value for key, value in region["tokens"].items() if key != "cached"}
    return region


def pdf_with_an_unrenderable_page() -> bytes:
    """Two pages; the second draws a 60000×60000 image, past any page pixel limit (`page_too_large`)."""
    bomb = "<< /Type /XObject /Subtype /Image /Width 60000 /Height 60000 /BitsPerComponent 8 /ColorSpace /DeviceRGB"
    return build_pdf(
        ["/MediaBox [0 0 612 792] /Resources << /Font << /F1 11 0 R >> >> /Contents 8 0 R",
         "/MediaBox [0 0 612 792] /Resources << /XObject << /Im1 10 0 R >> >> /Contents 9 0 R"],
        {8: stream_object(b"BT /F1 24 Tf 72 700 Td (Hello) Tj ET"),
         9: stream_object(b"q 612 0 0 792 0 0 cm /Im1 Do Q"),
         10: bomb + " /Length 3 >>\nstream\nabc\nendstream",
         11: "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"},
    )


CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
