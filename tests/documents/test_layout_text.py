"""How much of a run of text is math: math fonts and math symbols against the words of prose."""

from __future__ import annotations

import pytest

from pipeline.documents.layout_text import Span, math_weight


def spans(*runs: tuple[str, bool]) -> list[Span]:
    return [Span((0, 0, 1, 1), text, math_font) for text, math_font in runs]


def test_every_glyph_of_a_math_font_is_math():
    assert math_weight(spans(("fxy", True), ("(", False), ("x", True), (")", False))) == (4, 0)


def test_symbols_are_math_in_any_font_and_words_are_prose():
    assert math_weight(spans(("for all x ∈ X: d(x, y) ≥ 0", False))) == (2, 6)


@pytest.mark.parametrize(("text", "weight"), [
    ("sin x + cos y = 1", (2, 0)),  # function names are math
    ("α + β ≤ γ", (5, 0)),  # Greek letters are math
    ("Chapter 12, page 3.", (0, 11)),  # digits and punctuation are neither
])
def test_function_names_greek_and_digits(text: str, weight: tuple[int, int]):
    assert math_weight(spans((text, False))) == weight
