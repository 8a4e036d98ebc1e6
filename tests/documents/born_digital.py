"""Born-digital PDFs built with PyMuPDF for the pdf backend's tests, each with one thing real documents have.

A4 pages, 10 pt body text in Helvetica. Math is set in PyMuPDF's built-in CJK fallback font (Droid Sans Fallback),
which has the math symbols but is no math font, so a formula here is found by its symbols, as in a Word document.
Positions are given on the page as displayed, so a rotated page reads upright like the others.
"""

from __future__ import annotations

import math

import pymupdf

WIDTH, HEIGHT = 595, 842
LEFT = 72
BODY = ("Body text of the page, set in ten point type, runs across the whole column and wraps onto the next "
        "line as prose does. ") * 3
FORMULA = "d(x, y) > 0 ⇒ ∃ε > 0 : Bε(x) ∩ Bε(y) = ∅"
SECOND_FORMULA = "∀x ∈ X : d(x, x) = 0"
INLINE_MATH = ("Es gilt d(x, y) > 0 ⇒ ∃ε > 0 : Bε(x) ∩ Bε(y) = ∅ für alle Punkte x ≠ y des Raumes X, und daraus "
               "folgt, dass jeder metrische Raum ein Hausdorff-Raum ist, wie oben schon gezeigt wurde.")
MATH_FONT = "cjk"
HEADINGS = ["Beispiel 10", "Beispiel 11 (SNCF-Metrik)", "Kapitel 3: Stetigkeit", "Beispiel 12", "Beispiel 13"]
RUNNING_HEADS = {"odd": "Topologie - Vorlesungsskript", "even": "Kapitel 2. Metrische Räume"}


def text(page: pymupdf.Page, x: float, y: float, words: str, size: float = 10, font: str = "helv") -> None:
    """One line of text with its baseline at (x, y) on the displayed page."""
    page.insert_text(pymupdf.Point(x, y) * page.derotation_matrix, words, fontsize=size, fontname=font,
                     rotate=page.rotation)


def paragraph(page: pymupdf.Page, top: float, words: str = BODY, font: str = "helv") -> float:
    """`words` set in the page's column from `top`; returns where the next block may start, a line below."""
    right = page.rect.width - LEFT
    box = pymupdf.Rect(LEFT, top, right, page.rect.height - 60)
    spare = page.insert_textbox(box * page.derotation_matrix, words, fontsize=10, fontname=font,
                                rotate=page.rotation)
    return box.y1 - spare + 10


def _with_math_font(page: pymupdf.Page) -> pymupdf.Page:
    page.insert_font(fontname=MATH_FONT, fontbuffer=pymupdf.Font(MATH_FONT).buffer)
    return page


def synthetic_page(pages: int = 2) -> bytes:
    """A4 pages numbered from 7, each with a running header, title, heading, paragraph, a vector bar chart with a
    caption, a ruled 3×3 table, page number and footer (a header or footer is only one when it runs across pages)."""
    pdf = pymupdf.open()
    for number in range(7, 7 + pages):
        page = pdf.new_page(width=595, height=842)
        page.insert_text((72, 40), "Quire Journal, volume 1", fontsize=9)
        page.insert_text((72, 120), "A Synthetic Page", fontsize=24)
        page.insert_text((72, 170), "1 Introduction", fontsize=14, fontname="hebo")
        page.insert_textbox(pymupdf.Rect(72, 185, 523, 300), "Body text of the page, set in ten point type. " * 12,
                            fontsize=10)
        page.draw_rect(pymupdf.Rect(72, 320, 300, 520), color=(0, 0, 0))
        for i, height in enumerate((60, 120, 90, 150)):
            page.draw_rect(pymupdf.Rect(100 + 45 * i, 510 - height, 130 + 45 * i, 510), color=None,
                           fill=(0.2, 0.3, 0.8))
        page.insert_text((76, 330), "10", fontsize=6)
        page.insert_text((72, 540), "Figure 1: Four bars.", fontsize=10)
        for i in range(4):
            page.draw_line((330, 320 + 30 * i), (523, 320 + 30 * i))
            page.draw_line((330 + 64.33 * i, 320), (330 + 64.33 * i, 410))
        for row in range(3):
            for col in range(3):
                page.insert_text((336 + 64.33 * col, 340 + 30 * row), f"cell {row}{col}", fontsize=10)
        page.insert_text((290, 800), str(number), fontsize=10)
        page.insert_text((72, 825), "Confidential draft", fontsize=8)
    return pdf.tobytes()


def headings_in_the_top_band() -> bytes:
    """Five pages, each opening with a section heading in its top band (within 8% of the top edge on the portrait
    pages): under a running head on odd and on even pages, on a chapter's first page (no running head), on a
    landscape page and on a portrait page shown rotated by 90°. Every page has its number at the foot."""
    pdf = pymupdf.open()
    shapes = [((WIDTH, HEIGHT), 0), ((WIDTH, HEIGHT), 0), ((WIDTH, HEIGHT), 0), ((HEIGHT, WIDTH), 0),
              ((WIDTH, HEIGHT), 90)]
    for number, (heading, ((width, height), rotation)) in enumerate(zip(HEADINGS, shapes, strict=True), start=1):
        page = pdf.new_page(width=width, height=height)
        page.set_rotation(rotation)
        if number != 3:
            text(page, LEFT, 30, RUNNING_HEADS["odd" if number % 2 else "even"], size=9)
        text(page, LEFT, 58, heading, size=11, font="hebo")
        paragraph(page, 68, BODY * 2)
        text(page, page.rect.width / 2 - 3, page.rect.height - 32, str(number))
    return pdf.tobytes()


def vector_plot() -> bytes:
    """A page with a line chart drawn in vectors: a frame of axes with ticks, dashed grid lines, two curves, numeric
    tick labels outside the frame, axis titles, a legend inside and a caption below; prose above and below."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=WIDTH, height=HEIGHT)
    below = paragraph(page, 80)
    x0, y0, x1, y1 = 130, below + 30, 470, below + 250
    shape = page.new_shape()
    for i in range(6):
        gx, gy = x0 + i * (x1 - x0) / 5, y1 - i * (y1 - y0) / 5
        shape.draw_line((gx, y0), (gx, y1))
        shape.draw_line((x0, gy), (x1, gy))
        shape.finish(color=(0.8, 0.8, 0.8), width=0.4, dashes="[2] 0")
        shape.draw_line((gx, y1), (gx, y1 + 4))
        shape.draw_line((x0 - 4, gy), (x0, gy))
        shape.finish(color=(0, 0, 0), width=0.6)
        text(page, gx - 4, y1 + 14, str(i * 2), size=8)
        text(page, x0 - 22, gy + 3, f"{i * 0.2:.1f}", size=8)
    shape.draw_rect(pymupdf.Rect(x0, y0, x1, y1))
    shape.finish(color=(0, 0, 0), width=0.8)
    for colour, phase in (((0.1, 0.3, 0.8), 0.0), ((0.8, 0.2, 0.1), 1.3)):
        shape.draw_polyline([pymupdf.Point(x0 + t * (x1 - x0) / 60,
                                           y1 - (0.5 + 0.4 * math.sin(t / 6 + phase)) * (y1 - y0)) for t in range(61)])
        shape.finish(color=colour, width=1.2, closePath=False)
    shape.commit()
    text(page, x1 - 90, y0 + 16, "Messung A", size=8)
    text(page, x1 - 90, y0 + 28, "Messung B", size=8)
    text(page, (x0 + x1) / 2 - 20, y1 + 28, "Zeit t [s]", size=9)
    text(page, x0 - 40, y0 - 8, "Spannung [V]", size=9)
    text(page, LEFT, y1 + 52, "Abbildung 3: Zwei Messreihen über der Zeit.")
    paragraph(page, y1 + 68)
    return pdf.tobytes()


def text_on_a_panel(chart: bool = False, rounded: bool = False) -> bytes:
    """A page whose only text sits on a drawn panel (a filled rectangle inset from the edges, as slides and posters
    have; with `rounded`, its corners are curves): a title and a paragraph; with `chart`, a framed bar chart with
    numbered ticks on the panel below them."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=WIDTH, height=HEIGHT)
    page.draw_rect(pymupdf.Rect(50, 60, WIDTH - 50, 700), color=None, fill=(0.85, 0.9, 1.0),
                   radius=0.05 if rounded else None)
    text(page, LEFT, 110, "A Poster Title", size=20)
    below = paragraph(page, 130)
    if chart:
        page.draw_rect(pymupdf.Rect(120, below + 20, 420, below + 220), color=(0, 0, 0))
        for i, height in enumerate((60, 120, 90, 150)):
            page.draw_rect(pymupdf.Rect(150 + 60 * i, below + 220 - height, 190 + 60 * i, below + 220), color=None,
                           fill=(0.2, 0.3, 0.8))
        for i in range(3):
            text(page, 100, below + 224 - 75 * i, str(50 * i), size=8)
    return pdf.tobytes()


def prose_on_a_drawing() -> bytes:
    """A page whose only text sits on a line drawing (unfilled waves and circles, as a map or a diagram is drawn,
    over most of the page): a title, a paragraph and a short label "Nordufer"."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=WIDTH, height=HEIGHT)
    shape = page.new_shape()
    for row in range(12):
        shape.draw_polyline([pymupdf.Point(60 + 8 * t, 120 + 45 * row + 10 * math.sin(t / 3)) for t in range(60)])
    for center in ((150, 300), (420, 520), (300, 650)):
        shape.draw_circle(center, 40)
    shape.finish(color=(0.3, 0.5, 0.3), width=0.8, closePath=False)
    shape.commit()
    text(page, LEFT, 100, "Karte der Uferzonen", size=20)
    paragraph(page, 130)
    text(page, 380, 420, "Nordufer", size=9)
    return pdf.tobytes()


def highlighted() -> bytes:
    """A heading and a paragraph, each with a phrase under a highlight annotation whose appearance paints opaquely
    (blend mode Normal, as some producers write it, where PyMuPDF's own multiplies): a viewer that draws the
    appearance as written, as MuPDF does, shows a yellow bar where the words are."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=WIDTH, height=HEIGHT)
    text(page, LEFT, 60, "Highlighted Heading", size=12, font="hebo")
    paragraph(page, 80)
    for phrase in ("Highlighted Heading", "set in ten point type"):
        annot = page.add_highlight_annot(page.search_for(phrase, quads=True)[0])
        annot.set_colors(stroke=(1.0, 0.9, 0.2))
        annot.update()
        appearance = int(pdf.xref_get_key(annot.xref, "AP/N")[1].split()[0])
        pdf.xref_set_key(appearance, "Resources/ExtGState/H/BM", "/Normal")
    return pdf.tobytes()


def plot_with_words_inside(legend_in_a_row: bool) -> bytes:
    """A line chart on a coarse ruled grid (4 × 3 cells, numbered ticks outside), words inside the plot and a caption
    below, between paragraphs: either a label at a point in most cells (a ruled grid with words in its cells) or
    a legend of two entries side by side (a row of several cells between two horizontal rules of one width)."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=WIDTH, height=HEIGHT)
    below = paragraph(page, 80)
    x0, y0, x1, y1 = 130, below + 30, 470, below + 250
    shape = page.new_shape()
    for i in range(5):
        shape.draw_line((x0 + i * 85, y0), (x0 + i * 85, y1))
        text(page, x0 + i * 85 - 4, y1 + 14, str(i * 2), size=8)
    for i in range(4):
        shape.draw_line((x0, y1 - i * 220 / 3), (x1, y1 - i * 220 / 3))
        text(page, x0 - 22, y1 - i * 220 / 3 + 3, f"{i * 0.5:.1f}", size=8)
    shape.finish(color=(0.6, 0.6, 0.6), width=0.5)
    for colour, phase in (((0.1, 0.3, 0.8), 0.0), ((0.8, 0.2, 0.1), 1.3)):
        shape.draw_polyline([pymupdf.Point(x0 + t * (x1 - x0) / 60, y1 - (0.5 + 0.4 * math.sin(t / 6 + phase)) * 220)
                             for t in range(61)])
        shape.finish(color=colour, width=1.2, closePath=False)
    shape.commit()
    if legend_in_a_row:
        text(page, x0 + 10, y0 + 16, "Messung A", size=8)
        text(page, x0 + 100, y0 + 16, "Messung B", size=8)
    else:
        for i, (column, row) in enumerate([(0, 0), (1, 1), (2, 2), (3, 0)]):
            text(page, x0 + 8 + column * 85, y0 + 14 + row * 220 / 3, f"Punkt {i}", size=8)
    text(page, LEFT, y1 + 52, "Abbildung 4: Zwei Messreihen.")
    paragraph(page, y1 + 68)
    return pdf.tobytes()


def subscript_after_its_paragraph() -> bytes:
    """A paragraph whose first "x" carries the subscript "max", written after the paragraph (as a producer may emit
    a line's small glyphs last), so PyMuPDF makes the subscript a text block of its own inside the paragraph's."""
    pdf = pymupdf.open()
    page = pdf.new_page(width=WIDTH, height=HEIGHT)
    paragraph(page, 100, "The measured value x  of the first sample is larger than all the others. " * 6)
    after_x = page.search_for("x  of")[0]
    text(page, after_x.x0 + 6, after_x.y1 - 1, "max", size=6)
    return pdf.tobytes()


def formulas_in_pieces() -> bytes:
    """Prose, a sum numbered (2) whose limits ("n" above the ∑, "i=1" below) PyMuPDF gives as blocks of their own,
    a fraction whose denominator "2" is another, then prose again."""
    pdf = pymupdf.open()
    page = _with_math_font(pdf.new_page(width=WIDTH, height=HEIGHT))
    top = paragraph(page, 80) + 24
    text(page, 230, top, "f(x) = ∑ aᵢ xⁱ + ∫ g(t) dt", size=11, font=MATH_FONT)
    text(page, 268, top - 12, "n", size=7, font=MATH_FONT)
    text(page, 264, top + 9, "i=1", size=7, font=MATH_FONT)
    text(page, WIDTH - LEFT - 14, top, "(2)")
    text(page, 230, top + 34, "α + β", size=11, font=MATH_FONT)
    page.draw_line((228, top + 38), (262, top + 38))
    text(page, 242, top + 49, "2", size=11, font=MATH_FONT)
    paragraph(page, top + 64)
    return pdf.tobytes()


def display_formulas() -> bytes:
    """A page with prose, a centred display formula numbered (1) at the right margin, a paragraph whose second line
    is mostly inline math, and a second, unnumbered display formula, then prose again."""
    pdf = pymupdf.open()
    page = _with_math_font(pdf.new_page(width=WIDTH, height=HEIGHT))
    below = paragraph(page, 80)
    text(page, 190, below + 14, FORMULA, size=11, font=MATH_FONT)
    text(page, WIDTH - LEFT - 14, below + 14, "(1)")
    below = paragraph(page, below + 34, "Daraus folgt nun: " + INLINE_MATH, font=MATH_FONT)
    text(page, 230, below + 14, SECOND_FORMULA, size=11, font=MATH_FONT)
    paragraph(page, below + 34)
    return pdf.tobytes()
