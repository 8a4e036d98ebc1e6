"""How deep each heading sits in Markdown: `##` for a section, one `#` more per level below it.

A numbered heading says its own depth (`2.1 Setup` is one below `2 Method`). An unnumbered one says nothing, and
its type size has to: a heading set smaller than the numbered section in force before it (a bold `Definition 8`
under `1.2 Open Sets`) is a level below that section; one as large as some numbered headings (`References` beside
`2 Continuity`) is at their level; any other is a section. A heading's size is read off its region, the height
of its box over its lines of text, so the text layer and the model alike give it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the results render themselves through assemble.py, which uses this module
    from pipeline.documents.results import PageOutput, RegionOutput

HEADING = "paragraph_title"
_SECTION_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)*)\.?\s")
_SAME_SIZE = 1.1  # headings within this factor of one another's size are set alike (the estimate is rough)
_DEEPEST = 6


@dataclass(frozen=True)
class _Heading:
    key: tuple[int, int]  # (page index, region order)
    numbered: int | None  # the level its numbering gives
    size: float  # points per line


def heading_levels(pages: Iterable[PageOutput]) -> dict[tuple[int, int], int]:
    """The Markdown level (2 to 6) of every heading of `pages`, keyed by (page index, region order)."""
    headings = [heading for page in pages for region in page.regions if (heading := _heading(page, region))]
    numbered = [heading for heading in headings if heading.numbered is not None]
    levels: dict[tuple[int, int], int] = {}
    section: tuple[int, float] | None = None  # level and size of the numbered heading in force
    for heading in headings:
        if heading.numbered is not None:
            section = (heading.numbered, heading.size)
            levels[heading.key] = heading.numbered
        elif section is not None and heading.size * _SAME_SIZE < section[1]:
            levels[heading.key] = min(_DEEPEST, section[0] + 1)
        else:
            alike = Counter(other.numbered for other in numbered if _alike(other.size, heading.size))
            levels[heading.key] = alike.most_common(1)[0][0] if alike else 2
    return levels


def numbered_level(title: str) -> int:
    """`##` for a section title, one `#` more per level of its numbering (`2.1 Setup` → 3), at most six."""
    numbered = _SECTION_NUMBER.match(title)
    return min(_DEEPEST, 2 + (numbered.group(1).count(".") if numbered else 0))


def _heading(page: PageOutput, region: RegionOutput) -> _Heading | None:
    text = (region.content.text or "").strip()
    if region.label != HEADING or region.error is not None or not text:
        return None
    lines = len([line for line in text.splitlines() if line.strip()])
    number = numbered_level(text) if _SECTION_NUMBER.match(text) else None
    return _Heading((page.index, region.order), number, (region.bbox_pt[3] - region.bbox_pt[1]) / lines)


def _alike(size: float, other: float) -> bool:
    return max(size, other) < _SAME_SIZE * min(size, other)
