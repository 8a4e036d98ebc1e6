"""Display formulas: a line set apart whose spans are math becomes a `display_formula` region for the model, with its
equation number right after it; math inside a line of prose stays text."""

from __future__ import annotations

import pymupdf
from PIL import Image

from pipeline.documents.assemble import page_markdown
from pipeline.documents.layout_formulas import Formula, split_formulas
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.layout_text import Line, Span
from pipeline.documents.process import ProcessOptions
from pipeline.documents.render import RenderedPage, render_page
from pipeline.documents.source import Limits, ingest
from pipeline.documents.stream import process_document
from tests.documents.answers import Answers
from tests.documents.born_digital import FORMULA, SECOND_FORMULA, display_formulas, formulas_in_pieces

DPI = 100


def regions_and_words(data: bytes) -> list[tuple[str, str]]:
    with ingest(data, Limits(dpi=DPI)) as document:
        source = next(document.pages())
        page, pdf_page = render_page(source), source.load()
        return [(region.label, " ".join(pdf_page.get_textbox(pymupdf.Rect(page.to_points(region.bbox))).split()))
                for region in PdfLayout().detect(page, source)]


def test_a_displayed_formula_is_a_formula_region_with_its_equation_number_after_it():
    found = regions_and_words(display_formulas())
    assert [label for label, _ in found] == ["text", "display_formula", "formula_number", "text", "display_formula",
                                             "text"]
    assert found[1:3] == [("display_formula", FORMULA), ("formula_number", "(1)")]
    assert found[4] == ("display_formula", SECOND_FORMULA)


def test_the_pieces_of_a_formula_in_blocks_of_their_own_are_part_of_it():
    found = regions_and_words(formulas_in_pieces())
    assert [label for label, _ in found] == ["text", "display_formula", "formula_number", "display_formula", "text"]
    assert "n" in found[1][1].split() and "i=1" in found[1][1].split()  # the sum's limits
    assert found[3][1].split()[-1] == "2"  # the fraction's denominator


def test_inline_math_in_a_line_of_prose_stays_text():
    found = regions_and_words(display_formulas())
    assert found[3][0] == "text" and "Es gilt d(x, y) > 0 ⇒ ∃ε > 0" in found[3][1]


def test_formulas_go_to_the_model_and_the_number_tags_the_first_in_the_markdown():
    recognizer = Answers({"formula": "$$d(x,y)>0 \\Rightarrow \\exists\\varepsilon>0$$"})
    result = process_document(display_formulas(), "f.pdf", recognizer, PdfLayout(), ProcessOptions(Limits(dpi=DPI)))
    blocks = page_markdown(result.pages[0]).split("\n\n")
    assert [task.task for task in recognizer.tasks] == ["formula", "formula"]
    assert blocks[1] == "$$\nd(x,y)>0 \\Rightarrow \\exists\\varepsilon>0 \\tag{1}\n$$"
    assert blocks[2].startswith("Daraus folgt nun: Es gilt d(x, y) > 0") and blocks[3].startswith("$$\n")


# --- rows of lines, as PyMuPDF gives them ------------------------------------------------------------------------

PAGE = RenderedPage(0, Image.new("RGB", (595, 842), "white"), 595.0, 842.0, 72.0, 0, (1, 0, 0, 1, 0, 0))
PROSE = "Prose of the paragraph, set across the whole column as a line of text is."


def line(x0: float, y0: float, *spans: tuple[str, bool, float]) -> Line:
    """A 10 pt line at (x0, y0) of spans (text, in a math font, width in points); an empty text is a gap."""
    made, x = [], x0
    for text, math_font, width in spans:
        if text:
            made.append(Span((x, y0, x + width, y0 + 12), text, math_font))  # points = pixels here
        x += width
    chars = sum(len(span.text) for span in made)
    return Line((x0, y0, x, y0 + 12), " ".join(span.text for span in made), tuple(made), chars, 10.0, False)


def paragraph(top: float, rows: int) -> list[Line]:
    return [line(72, top + 12 * i, (PROSE, False, 451)) for i in range(rows)]


def test_a_row_in_math_fonts_with_space_around_it_is_a_formula_even_at_the_column_edge():
    formula = line(72, 150, ("f", True, 6), ("(x) =", False, 24), ("x", True, 6), ("2", False, 5))
    formulas, runs = split_formulas([paragraph(100, 3), [formula], paragraph(180, 3)], PAGE)
    assert formulas == [Formula(formula.bbox)]
    assert [len(run) for run in runs] == [3, 3]


def test_the_rows_of_a_fraction_are_one_formula():
    numerator = line(250, 150, ("a", True, 6), ("+", False, 8), ("b", True, 6))
    denominator = line(253, 163, ("c", True, 6), ("−", True, 8), ("d", True, 6))
    formulas, _ = split_formulas([paragraph(100, 3), [numerator, denominator], paragraph(200, 3)], PAGE)
    assert formulas == [Formula((250, 150, 273, 175))]


def test_an_equation_number_at_the_left_end_is_cut_off_too():
    row = line(80, 150, ("(2.1)", False, 20), ("", False, 150), ("x", True, 6), ("∈", True, 8), ("X", True, 6))
    formulas, _ = split_formulas([paragraph(100, 3), [row], paragraph(180, 3)], PAGE)
    assert formulas == [Formula((250, 150, 270, 162), number=(80, 150, 100, 162))]


def test_a_math_heavy_line_of_a_paragraph_stays_text():
    math_line = line(72, 124, ("d(x, y) > 0 ⇒ ∃ε > 0 : Bε(x) ∩ Bε(y) = ∅ for all x ≠ y in X, as shown", False, 451))
    block = paragraph(100, 2) + [math_line] + paragraph(136, 2)
    formulas, runs = split_formulas([block], PAGE)
    assert formulas == [] and runs == [block]
