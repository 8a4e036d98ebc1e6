"""Page ranges as people write them (`1-5,9`, `3-`): 1-based, inclusive, checked before any document is opened."""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE = re.compile(r"^(\d+)(?:(-)(\d*))?$")


@dataclass(frozen=True)
class PageRanges:
    """Closed or open-ended (`end` None) 1-based ranges; a 0-based page index is `in` them."""

    spans: tuple[tuple[int, int | None], ...]
    text: str

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and any(
            start <= index + 1 and (end is None or index + 1 <= end) for start, end in self.spans)

    def first(self) -> int:
        """The lowest page number asked for, 1-based."""
        return min(start for start, _ in self.spans)


def parse_page_ranges(text: str) -> PageRanges:
    """`1-5,9` → pages 1 to 5 and 9; `7-` → 7 to the end. ValueError, saying what is wrong, for anything else."""
    spans = []
    for part in (part.strip() for part in text.split(",")):
        match = _RANGE.match(part)
        if match is None:
            raise ValueError(f"{part or 'an empty range'!r} is not a page or range (write e.g. 1-5,9 or 7-)")
        start = int(match.group(1))
        end = (int(match.group(3)) if match.group(3) else None) if match.group(2) else start
        if start < 1 or end is not None and end < start:
            raise ValueError(f"{part!r}: pages count from 1 and a range runs from low to high")
        spans.append((start, end))
    return PageRanges(tuple(spans), text)
