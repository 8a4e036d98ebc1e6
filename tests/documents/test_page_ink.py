"""The ink the text-layer test reads: the page's own content, without the annotations that only mark its text."""

from __future__ import annotations

from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.process import ProcessOptions
from pipeline.documents.source import Limits
from pipeline.documents.stream import process_document
from tests.documents.answers import Answers
from tests.documents.born_digital import highlighted


def test_text_under_opaque_highlight_annotations_comes_from_the_text_layer():
    recognizer = Answers()
    result = process_document(highlighted(), "marked.pdf", recognizer, PdfLayout(),
                              ProcessOptions(Limits(dpi=100)))
    heading, body = result.pages[0].regions
    assert (heading.label, heading.source, heading.content.text) == ("paragraph_title", "text-layer",
                                                                    "Highlighted Heading")
    assert body.source == "text-layer" and "set in ten point type" in body.content.text
    assert recognizer.tasks == []
