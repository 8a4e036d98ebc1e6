"""Text blocks PyMuPDF splits off inside another (a line's sub- and superscripts) are read with the text around them."""

from __future__ import annotations

from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.process import ProcessOptions
from pipeline.documents.source import Limits
from pipeline.documents.stream import process_document
from tests.documents.answers import Answers
from tests.documents.born_digital import subscript_after_its_paragraph


def test_a_subscript_block_inside_its_paragraph_is_read_once_with_it():
    result = process_document(subscript_after_its_paragraph(), "sub.pdf", Answers(), PdfLayout(),
                              ProcessOptions(Limits(dpi=100)))
    (paragraph,) = result.pages[0].regions
    assert paragraph.label == "text" and paragraph.source == "text-layer"
    assert paragraph.content.text.split()[:6] == ["The", "measured", "value", "x", "max", "of"]
    assert paragraph.content.text.split().count("max") == 1
