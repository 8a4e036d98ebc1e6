"""Each page's result names the layout that actually laid it out, and why when that is not the one asked for."""

from __future__ import annotations

import pytest
from PIL import Image

from pipeline.documents.layout import AutoLayout
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.lazy_recognizer import LazyRecognizer, ModelUnavailable
from pipeline.documents.process import ProcessOptions
from pipeline.documents.source import Limits
from pipeline.documents.stream import process_document
from tests.documents.samples import corpus_bytes, image_bytes


def no_model() -> LazyRecognizer:
    def refuse() -> None:
        raise ModelUnavailable("model_none", "no model in this test")

    return LazyRecognizer(refuse)


def first_page_layout(data: bytes, layout) -> tuple[str | None, str | None]:
    page = process_document(data, "d", no_model(), layout, ProcessOptions(Limits(dpi=36))).pages[0]
    return page.layout, page.layout_reason


@pytest.mark.parametrize(("document", "layout", "expected"), [
    ("grayscale-image.pdf", "auto", ("page", "no layout weights, no text layer")),
    ("minimal-document.pdf", "auto", ("pdf", "no layout weights")),
    ("grayscale-image.pdf", "pdf", ("page", "no text layer")),
    ("minimal-document.pdf", "pdf", ("pdf", None)),
    ("minimal-document.pdf", "page", ("page", None)),
])
def test_the_page_says_which_layout_laid_it_out_and_why(tmp_path, document: str, layout: str, expected):
    backends = {"auto": AutoLayout(str(tmp_path / "no-layout-weights")), "pdf": PdfLayout(), "page": PageLayout()}
    assert first_page_layout(corpus_bytes(document), backends[layout]) == expected


def test_an_image_under_auto_without_layout_weights_is_one_page_region_because_it_is_no_pdf(tmp_path):
    png = image_bytes(Image.new("RGB", (200, 100), "white"), "PNG")
    layout = AutoLayout(str(tmp_path / "no-layout-weights"))
    assert first_page_layout(png, layout) == ("page", "no layout weights, not a PDF")
