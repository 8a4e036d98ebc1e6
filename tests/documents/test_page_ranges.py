"""`--pages`: ranges as people write them, refused with a reason when they make no sense."""

from __future__ import annotations

import pytest

from pipeline.documents.page_ranges import parse_page_ranges


def test_ranges_and_single_pages_select_those_pages_counted_from_one():
    pages = parse_page_ranges("1-3, 7")
    assert [index for index in range(10) if index in pages] == [0, 1, 2, 6]


def test_an_open_range_runs_to_the_end():
    pages = parse_page_ranges("5-")
    assert (3 in pages, 4 in pages, 10_000 in pages, pages.first()) == (False, True, True, 5)


@pytest.mark.parametrize(("text", "says"), [
    ("3-1", "low to high"), ("0", "count from 1"), ("1-2,x", "'x' is not a page"), ("1,,2", "an empty range"),
])
def test_a_bad_range_is_refused_saying_what_is_wrong(text: str, says: str):
    with pytest.raises(ValueError, match=says):
        parse_page_ranges(text)
