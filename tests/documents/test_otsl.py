"""otsl_to_html: spans, empty cells, ragged rows, escaping, and garbage that must never raise."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.documents.otsl import otsl_to_html

CELL = re.compile(r'<(td|th)(?: rowspan="(\d+)")?(?: colspan="(\d+)")?>(.*?)</\1>')


def table(*rows: str) -> str:
    return "<table>" + "".join(f"<tr>{row}</tr>" for row in rows) + "</table>"


def grid_of(html: str) -> list[list[str]]:
    """Lay the HTML table's cells out on a grid (each slot names its cell's text); asserts no slot is covered twice."""
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    slots: dict[tuple[int, int], str] = {}
    for r, row in enumerate(rows):
        c = 0
        for _tag, rowspan, colspan, text in CELL.findall(row):
            while (r, c) in slots:
                c += 1
            for rr in range(r, r + int(rowspan or 1)):
                for cc in range(c, c + int(colspan or 1)):
                    assert (rr, cc) not in slots, f"slot {(rr, cc)} covered twice in {html}"
                    slots[(rr, cc)] = text
            c += int(colspan or 1)
    height = max((r for r, _ in slots), default=-1) + 1
    width = max((c for _, c in slots), default=-1) + 1
    return [[slots.get((r, c), "<hole>") for c in range(width)] for r in range(height)]


def test_plain_grid():
    html = otsl_to_html("<fcel>Name<fcel>Age<nl><fcel>Ada<fcel>36<nl>")
    assert html == table("<td>Name</td><td>Age</td>", "<td>Ada</td><td>36</td>")


def test_colspan_from_lcel():
    html = otsl_to_html("<fcel>Totals<lcel><lcel><nl><fcel>a<fcel>b<fcel>c<nl>")
    assert html == table('<td colspan="3">Totals</td>', "<td>a</td><td>b</td><td>c</td>")


def test_rowspan_from_ucel():
    html = otsl_to_html("<fcel>Group<fcel>x<nl><ucel><fcel>y<nl><ucel><fcel>z<nl>")
    assert html == table('<td rowspan="3">Group</td><td>x</td>', "<td>y</td>", "<td>z</td>")


def test_block_span_from_xcel():
    html = otsl_to_html("<fcel>Big<lcel><fcel>r<nl><ucel><xcel><fcel>s<nl><fcel>1<fcel>2<fcel>3<nl>")
    assert html == table(
        '<td rowspan="2" colspan="2">Big</td><td>r</td>', "<td>s</td>", "<td>1</td><td>2</td><td>3</td>"
    )
    assert grid_of(html) == [["Big", "Big", "r"], ["Big", "Big", "s"], ["1", "2", "3"]]


def test_empty_cells():
    html = otsl_to_html("<ecel><fcel>b<nl><fcel>c<ecel><nl>")
    assert html == table("<td></td><td>b</td>", "<td>c</td><td></td>")


def test_ragged_rows_are_padded_to_a_rectangle():
    html = otsl_to_html("<fcel>a<nl><fcel>b<fcel>c<fcel>d<nl><fcel>e<fcel>f")  # the last <nl> is missing too
    assert grid_of(html) == [["a", "", ""], ["b", "c", "d"], ["e", "f", ""]]


def test_cell_text_is_escaped_and_whitespace_collapsed():
    html = otsl_to_html("<fcel> x < y & z \n <fcel><script>alert(1)</script><nl>")
    assert html == table("<td>x &lt; y &amp; z</td><td>alert(1)</td>")


def test_header_tags_from_docling_are_header_cells():
    assert otsl_to_html("<ched>H<nl><fcel>v<nl>") == table("<th>H</th>", "<td>v</td>")


def test_orphan_merge_tags_become_empty_cells():
    # lcel with nothing on its left, ucel in the first row: nothing to merge into.
    assert grid_of(otsl_to_html("<ucel><fcel>a<nl><lcel><fcel>b<nl>")) == [["", "a"], ["", "b"]]


def test_text_in_a_merged_slot_is_kept():
    assert otsl_to_html("<fcel>left<lcel>right<nl>") == table('<td colspan="2">left right</td>')


def test_tags_tolerate_case_spaces_closers_and_unknowns():
    html = otsl_to_html("<FCEL>a</fcel>< fcel >b<br><nl/><fcel>c<foo><lcel><nl>")
    assert grid_of(html) == [["a", "b"], ["c", "c"]]


def test_no_otsl_tags_is_escaped_plain_text():
    assert otsl_to_html("The model said: 3 < 4 & so on") == "The model said: 3 &lt; 4 &amp; so on"
    assert otsl_to_html("") == ""
    assert otsl_to_html("<nl><nl>") == ""


def test_non_string_garbage_does_not_raise():
    assert otsl_to_html(None) == "None"  # type: ignore[arg-type]


TOKENS = st.sampled_from(
    ["<fcel>", "<ecel>", "<lcel>", "<ucel>", "<xcel>", "<nl>", "<ched>", "<", ">", "<x>", "a", " "]
)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.one_of(TOKENS, st.text(max_size=4)), max_size=40))
def test_any_token_soup_gives_a_rectangular_table_or_text(pieces: list[str]):
    otsl = "".join(pieces)
    html = otsl_to_html(otsl)
    assert isinstance(html, str)
    if not html.startswith("<table>"):
        assert "<" not in html  # plain escaped text
        return
    grid = grid_of(html)
    assert grid, html
    assert all("<hole>" not in row for row in grid), f"not rectangular: {grid} from {otsl!r}"
    assert len({len(row) for row in grid}) == 1
