"""A text block runs on into the next when its sentence is unfinished and the next goes on in lower case."""

from __future__ import annotations

import pytest

from pipeline.documents.paragraph_flow import run_on, runs_on


@pytest.mark.parametrize(("before", "after"), [
    ("runs on", "and on."),
    ("a list of items,", "and more."),
    ("a hyphen-", "ated word."),
])
def test_an_unfinished_sentence_runs_on_into_lower_case(before: str, after: str):
    assert runs_on(before, after)


@pytest.mark.parametrize(("before", "after"), [
    ("Ends here.", "and lower case."),
    ("Asks?", "then goes on."),
    ("the following:", "an item"),
    ("(as shown.)", "and then"),
    ("“so it is.”", "and so."),
    ("No end", "But a capital."),
    ("No end", "42 is a number."),
])
def test_a_finished_sentence_or_a_new_one_starts_a_paragraph(before: str, after: str):
    assert not runs_on(before, after)


def test_the_blocks_join_by_a_line_break_or_into_the_word_a_hyphen_cut():
    assert run_on("runs on \n", " and on.") == "runs on\nand on."
    assert run_on("a hyphen-", "ated word.") == "a hyphenated word."
    assert run_on("see 3-", "and 4") == "see 3-\nand 4"  # a hyphen after a digit is a range, kept
