"""Post-processing turns raw model output into clean content: runaway loops cut, formulas bare, tables as HTML."""

from __future__ import annotations

import pytest

from pipeline.documents.postprocess import normalize_formula, postprocess, truncate_repetition


def test_a_runaway_phrase_is_cut_to_one_copy_even_when_the_model_stopped_by_itself():
    text, cut = truncate_repetition("Total revenue grew. " + "and the results " * 12)
    assert (text, cut) == ("Total revenue grew. and the results", True)


def test_a_decode_stopped_by_the_repetition_guard_or_max_tokens_is_cut_after_fewer_copies():
    looped = "Intro.\n" + "the same line\n" * 3 + "the sa"  # three copies and a partial fourth (max_tokens)
    assert truncate_repetition(looped)[1] is False
    assert truncate_repetition(looped, cut_off=True) == ("Intro.\nthe same line", True)


@pytest.mark.parametrize("text", [
    "Wait for it...",
    "Table of contents ........ 3",
    "She said no, no, no.",
    "aa bb cc dd",
    "",
])
def test_ordinary_text_with_short_repeats_is_left_alone(text):
    assert truncate_repetition(text) == (text, False)
    assert truncate_repetition(text, cut_off=True) == (text, False)


def test_postprocess_marks_truncation_and_uses_the_finish_reason():
    looped = "x = 1; " * 5
    assert postprocess("ocr", looped, "repetition").truncated
    assert postprocess("ocr", looped, "repetition").text == "x = 1;"
    assert postprocess("ocr", "plain text", "stop").text == "plain text"


@pytest.mark.parametrize(("raw", "latex"), [
    ("$$ E = mc^2 $$", "E = mc^2"),
    ("\\[\\frac{a}{b}\\]", "\\frac{a}{b}"),
    ("\\( x_i \\)", "x_i"),
    ("$x+1$", "x+1"),
    ("$$\n\\[ y \\]\n$$", "y"),  # nested wraps all go
    ("  \\sum_i x_i  ", "\\sum_i x_i"),  # already bare: only stripped
    ("$a$ and $b$", "$a$ and $b$"),  # two inline formulas are not one wrapped formula
    ("$5\\$$", "5\\$"),  # an escaped dollar inside is content
    ("\\$5\\$", "\\$5\\$"),  # escaped dollars are not delimiters
])
def test_formulas_lose_their_outer_delimiters_only(raw, latex):
    assert normalize_formula(raw) == latex


def test_a_formula_region_carries_its_latex():
    content = postprocess("formula", "$$\\alpha$$")
    assert content.latex == "\\alpha" and content.text == "\\alpha" and content.html is None


def test_a_table_region_carries_html_from_otsl_and_keeps_the_otsl_as_text():
    content = postprocess("table", "<fcel>a<fcel>b<nl><fcel>c<lcel><nl>")
    assert content.html == '<table><tr><td>a</td><td>b</td></tr><tr><td colspan="2">c</td></tr></table>'
    assert content.text.startswith("<fcel>a")


def test_identical_rows_at_the_end_of_a_finished_table_are_kept():
    otsl = "<fcel>h<fcel>i<nl>" + "<ecel><ecel><nl>" * 6
    assert postprocess("table", otsl, "stop").html.count("<tr>") == 7
    assert postprocess("table", otsl, "length").html.count("<tr>") == 2  # cut off: the empty rows were a loop
