"""Running headers and footers: lines in a page's top or bottom band that recur across the document's pages.

Position alone cannot tell furniture from content: a section heading or a chapter's first line often sits in the
top band too, and leaving it out of the Markdown loses it. What marks a running header, footer or page number is
that it comes back, at the same height, on other pages. So this looks at the whole document once: every line of a
block that lies wholly inside a band is a candidate, and a candidate is furniture when a candidate of another page
has the same text once digits are set aside, sits at the same distance from the page edge, and differs only in
numbers that count pages ("Chapter 2 · 17" on page 17 and "Chapter 2 · 19" on page 19). That last test keeps
"Example 10" on page 5 and "Example 12" on page 9 apart, which ignoring digits outright would merge; and lines
that differ need three pages to count as running, so two headings that happen to count along with the pages
("Example 12" atop page 12, "Example 13" atop page 13) do not. Nor is a line furniture when body text lies between
it and the edge: a reference manual may repeat a line near the foot of two pages, but no footer has text under it.

The service lays out one page per task, each on a freshly opened copy of the upload; the answer depends on the
PDF's bytes alone, so it is computed on first use and kept per content hash, and any page task finds the same.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from typing import Literal

import pymupdf

from pipeline.documents.layout_text import TEXT_FLAGS, line_text
from pipeline.documents.source import IngestedDocument

Band = Literal["top", "bottom"]

BAND_SHARE = 0.15  # running heads and feet live in the top and bottom 15% of a page (LaTeX's page number: ~14.8%)
_SAME_PLACE_PT = 3.0  # two occurrences of one running line sit this close to the same distance from the edge
_NEIGHBOURS = 4  # occurrences compared on each side, in page order: running lines recur on nearby pages
_CACHED_DOCUMENTS = 32
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Furniture:
    """The running lines of one document: for each page index, (band, key) of every furniture line on it."""

    pages: dict[int, frozenset[tuple[Band, str]]]

    def holds(self, page_index: int, band: Band, text: str) -> bool:
        """Whether the line `text` in `band` of page `page_index` is a running header, footer or page number."""
        return (band, line_key(text)) in self.pages.get(page_index, frozenset())


@dataclass(frozen=True)
class _Candidate:
    """A line in a band of a page."""

    page: int
    band: Band
    key: str
    edge_distance: float  # points from the line's centre to the nearer (top or bottom) page edge
    eligible: bool  # its block lies wholly inside the band: a paragraph reaching into the body is no furniture

    @property
    def pattern(self) -> str:
        return _DIGITS.sub("#", self.key)

    @property
    def numbers(self) -> list[int]:
        return [int(digits) for digits in _DIGITS.findall(self.key)]


def line_key(text: str) -> str:
    """What identifies a line across pages: its text without whitespace (extractors space spans differently)."""
    return _SPACE.sub("", text)


def band_of(y0: float, y1: float, height: float) -> Band | None:
    """The band a line from y0 to y1 (down from the top of a page `height` tall) lies wholly inside, if any."""
    if y1 <= BAND_SHARE * height:
        return "top"
    if y0 >= (1 - BAND_SHARE) * height:
        return "bottom"
    return None


class _Cache:
    """Furniture per document content hash, computed once even when several threads ask for it together."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.found: OrderedDict[str, Furniture] = OrderedDict()
        self.computing: dict[str, threading.Lock] = {}
        self.lock = threading.Lock()

    def get(self, document: IngestedDocument) -> Furniture:
        digest = document.sha256
        with self.lock:
            if (hit := self.found.get(digest)) is not None:
                self.found.move_to_end(digest)
                return hit
            computing = self.computing.setdefault(digest, threading.Lock())
        with computing:  # a second thread asking for the same document waits for the first one's answer
            with self.lock:
                hit = self.found.get(digest)
            if hit is None:
                hit = find_furniture(document)
                self.put(digest, hit)
                with self.lock:
                    self.computing.pop(digest, None)
        return hit

    def put(self, digest: str, furniture: Furniture) -> None:
        with self.lock:
            self.found[digest] = furniture
            self.found.move_to_end(digest)
            while len(self.found) > self.size:
                self.found.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.found.clear()


_CACHE = _Cache(_CACHED_DOCUMENTS)


def clear_cache() -> None:
    """Forget every document seen: what a benchmark does to time the first look at a document, as a worker has it."""
    _CACHE.clear()


def remember_furniture(sha256: str, furniture: Furniture) -> None:
    """Take the running lines of the document with this content hash as found elsewhere (by the page worker that
    opened it), so a worker given one of its pages does not look at the whole document again."""
    _CACHE.put(sha256, furniture)


def document_furniture(document: IngestedDocument) -> Furniture:
    """The document's running lines, from the cache when this content was seen before in this process."""
    return _CACHE.get(document)


def find_furniture(document: IngestedDocument) -> Furniture:
    """The running lines of a PDF, from one pass over its pages' band lines."""
    band_lines = [line for index in range(document.page_count) for line in _band_lines(document, index)]
    groups: dict[tuple[Band, str], list[_Candidate]] = defaultdict(list)
    for line in band_lines:
        if line.eligible:
            groups[(line.band, line.pattern)].append(line)
    running = {id(line) for group in groups.values() for line in _recurring(group)}
    body_edge = _body_edges(band_lines, running)
    pages: dict[int, set[tuple[Band, str]]] = defaultdict(set)
    for line in band_lines:
        if id(line) in running and line.edge_distance <= body_edge[(line.page, line.band)] + _SAME_PLACE_PT:
            pages[line.page].add((line.band, line.key))
    return Furniture({index: frozenset(found) for index, found in pages.items()})


def _body_edges(band_lines: list[_Candidate], running: set[int]) -> dict[tuple[int, Band], float]:
    """For each page and band, how close to the edge the body's text comes: furniture is never farther in, so a
    line that recurs by chance among body lines (a reference manual's "buffer: may be NULL") stays body text."""
    edges: dict[tuple[int, Band], float] = defaultdict(lambda: float("inf"))
    for line in band_lines:
        if id(line) not in running:
            edges[(line.page, line.band)] = min(edges[(line.page, line.band)], line.edge_distance)
    return edges


def _band_lines(document: IngestedDocument, index: int) -> list[_Candidate]:
    """The lines of page `index` inside a band, those of blocks wholly inside it eligible as furniture; none for a
    page that cannot be read."""
    try:
        page = document.load_page(index)
        blocks = page.get_text("dict", flags=TEXT_FLAGS)["blocks"]
    except Exception:  # a damaged page has no furniture to offer; laying it out reports the damage
        return []
    height = page.rect.height
    shown = (lambda bbox: pymupdf.Rect(bbox) * page.rotation_matrix) if page.rotation else pymupdf.Rect
    lines = []
    for block in blocks:
        block_box = shown(block["bbox"])
        if BAND_SHARE * height < block_box.y0 and block_box.y1 < (1 - BAND_SHARE) * height:
            continue  # wholly in the body
        eligible = band_of(block_box.y0, block_box.y1, height) is not None
        for raw in block.get("lines", ()):
            text, box = line_text(raw), shown(raw["bbox"])
            band = band_of(box.y0, box.y1, height)
            if text and band is not None:
                centre = (box.y0 + box.y1) / 2
                lines.append(_Candidate(index, band, line_key(text), centre if band == "top" else height - centre,
                                        eligible))
    return lines


def _recurring(group: list[_Candidate]) -> list[_Candidate]:
    """The candidates of one (band, digit pattern) group that recur on other pages.

    Occurrences that match link up; a linked set is furniture when it spans three pages, or two with the very same
    text. Two headings that happen to count along with the pages ("Example 12" atop page 12, "Example 13" atop
    page 13) make a set of two differing lines, which a running line with a page number soon outgrows.
    """
    ordered = sorted(group, key=lambda candidate: candidate.page)
    parent = list(range(len(ordered)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, candidate in enumerate(ordered):
        for j in range(i + 1, min(len(ordered), i + 1 + _NEIGHBOURS)):
            if _same_running_line(candidate, ordered[j]):
                parent[root(j)] = root(i)
    linked: dict[int, list[_Candidate]] = defaultdict(list)
    for i, candidate in enumerate(ordered):
        linked[root(i)].append(candidate)
    return [candidate for members in linked.values() if _runs(members) for candidate in members]


def _runs(members: list[_Candidate]) -> bool:
    pages = {candidate.page for candidate in members}
    return len(pages) >= 3 or (len(pages) == 2 and len({candidate.key for candidate in members}) == 1)


def _same_running_line(first: _Candidate, later: _Candidate) -> bool:
    """One running line on two pages: same place, and each number either the same or counting the pages."""
    if later.page == first.page or abs(first.edge_distance - later.edge_distance) > _SAME_PLACE_PT:
        return False
    pages_apart = later.page - first.page
    return all(b == a or b - a == pages_apart for a, b in zip(first.numbers, later.numbers, strict=True))
