"""The ink the text-layer test reads: the page's own content, without the annotations that only mark its text.

Highlight, underline, squiggly and strike-out annotations add no words; they mark words the text layer already
has. Their appearance is drawn over the page, and some producers paint a highlight opaquely, so the page as MuPDF
shows it has a coloured bar where the words are: no ink left for the words to cover, and the region would go to a
model that sees no text either. Under those annotations the ink is read from the page drawn without annotations;
everywhere else (form fields, stamps and notes, whose words the text layer lacks) from the page as shown.
"""

from __future__ import annotations

import math

import numpy as np
import pymupdf

from pipeline.documents.render import RenderedPage

_MARKUP = [pymupdf.PDF_ANNOT_HIGHLIGHT, pymupdf.PDF_ANNOT_UNDERLINE, pymupdf.PDF_ANNOT_SQUIGGLY,
           pymupdf.PDF_ANNOT_STRIKE_OUT]


def page_grey(page: RenderedPage, pdf_page: pymupdf.Page) -> np.ndarray:
    """The rendered page in grey levels, with the areas under text-markup annotations drawn without them."""
    grey = np.asarray(page.image.convert("L"))
    marks = [page.to_pixels(tuple(annot.rect)) for annot in pdf_page.annots(types=_MARKUP)]
    if not marks:
        return grey
    plain = _without_annotations(page, pdf_page)
    grey = grey.copy()
    height, width = min(grey.shape[0], plain.shape[0]), min(grey.shape[1], plain.shape[1])  # a rounding apart
    for x0, y0, x1, y1 in marks:
        area = (slice(max(0, math.floor(y0)), min(height, math.ceil(y1))),
                slice(max(0, math.floor(x0)), min(width, math.ceil(x1))))
        grey[area] = plain[area]
    return grey


def _without_annotations(page: RenderedPage, pdf_page: pymupdf.Page) -> np.ndarray:
    """The page drawn as render.py draws it (same zoom, so the same pixels), but without any annotation."""
    pixmap = pdf_page.get_pixmap(matrix=pymupdf.Matrix(page.scale, page.scale), colorspace=pymupdf.csGRAY,
                                 alpha=False, annots=False)
    rows = np.frombuffer(pixmap.samples, dtype=np.uint8).reshape(pixmap.height, pixmap.stride)
    return rows[:, :pixmap.width]
