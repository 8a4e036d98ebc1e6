"""Heading levels: the numbering where there is one, else the type size beside the numbered section in force."""

from __future__ import annotations

from pipeline.documents.heading_levels import heading_levels, numbered_level
from pipeline.documents.results import PageOutput, RegionContent, RegionOutput


def heading(order: int, text: str, size: float, label: str = "paragraph_title") -> RegionOutput:
    """A region whose box is as tall as `text`'s lines set at `size` points."""
    height = size * len(text.splitlines())
    return RegionOutput(order, label, 1.0, (0.0, 0.0, 1.0, 1.0), (72.0, 100.0 * order, 300.0, 100.0 * order + height),
                        "ocr", "text-layer", RegionContent(text))


def levels(*pages: list[RegionOutput]) -> list[int]:
    found = heading_levels([PageOutput(index, "succeeded", regions=regions) for index, regions in enumerate(pages)])
    return [level for _, level in sorted(found.items())]


def test_numbering_gives_the_depth():
    assert [numbered_level(title) for title in ("1 Intro", "2.1 Setup", "3.2.1. Detail", "1.2.3.4.5.6 Deep")] == \
        [2, 3, 4, 6]


def test_an_unnumbered_heading_smaller_than_its_section_sits_below_it():
    assert levels([heading(0, "1 Spaces", 14), heading(1, "1.2 Open Sets", 12), heading(2, "Definition 8", 10)],
                  [heading(0, "Definition 9", 10), heading(1, "2 Maps", 14), heading(2, "Remark", 10)]) == \
        [2, 3, 4, 4, 2, 3]


def test_an_unnumbered_heading_as_large_as_numbered_ones_takes_their_level():
    assert levels([heading(0, "1 Spaces", 14), heading(1, "1.1 Sets", 12), heading(2, "References", 14),
                   heading(3, "Notation", 12)]) == [2, 3, 2, 3]


def test_before_any_numbered_heading_or_without_one_a_heading_is_a_section():
    assert levels([heading(0, "Abstract", 10), heading(1, "1 Spaces", 14)]) == [2, 2]
    assert levels([heading(0, "Preface", 14), heading(1, "Thanks", 10)]) == [2, 2]


def test_a_heading_of_two_lines_is_sized_by_its_line():
    assert levels([heading(0, "1 Spaces", 14), heading(1, "Completeness of\nmetric spaces", 14)]) == [2, 2]


def test_only_headings_with_text_count():
    regions = [heading(0, "1 Spaces", 14), heading(1, "Body", 10, label="text"), heading(2, "   ", 10)]
    assert heading_levels([PageOutput(0, "succeeded", regions=regions)]) == {(0, 0): 2}
