"""Sample inputs built in memory for the document tests.

PDFs are written by hand where PyMuPDF will not save the shape (zero pages) or is too slow (10,000 pages take
PyMuPDF ~25 s); images are made with Pillow, and a pixel bomb is only a PNG header, never allocated.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from PIL import Image

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"
CORPUS_PDFS = sorted(path.name for path in CORPUS.glob("*.pdf"))
ENCRYPTED = "libreoffice-writer-password.pdf"
ENCRYPTED_PASSWORD = "openpassword"


def corpus_bytes(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


def build_pdf(pages: list[str], extra_objects: dict[int, str] | None = None) -> bytes:
    """A classic-xref PDF whose page tree holds one page per entry of `pages` (each the inside of a page dict).

    Objects 1 and 2 are the catalog and page tree; pages follow from 3; `extra_objects` adds numbered objects
    (content streams, say) after them, so a page dict can refer to one by number.
    """
    first_page = 3
    objects: dict[int, str] = {
        1: "<< /Type /Catalog /Pages 2 0 R >>",
        2: "<< /Type /Pages /Kids [{}] /Count {} >>".format(
            " ".join(f"{first_page + i} 0 R" for i in range(len(pages))), len(pages)
        ),
    }
    for i, body in enumerate(pages):
        objects[first_page + i] = f"<< /Type /Page /Parent 2 0 R {body} >>"
    objects.update(extra_objects or {})
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}
    for num in sorted(objects):
        offsets[num] = len(out)
        out += f"{num} 0 obj\n{objects[num]}\nendobj\n".encode("latin-1")
    size = max(objects) + 1
    xref_at = len(out)
    out += f"xref\n0 {size}\n0000000000 65535 f \n".encode()
    for num in range(1, size):
        out += f"{offsets[num]:010d} 00000 n \n".encode() if num in offsets else b"0000000000 65535 f \n"
    out += f"trailer\n<< /Size {size} /Root 1 0 R >>\nstartxref\n{xref_at}\n%%EOF\n".encode()
    return bytes(out)


def linearized_pdf(text: str) -> bytes:
    """A one-page linearized PDF whose catalog only its first-page trailer names, read from the wrong end.

    A linearized file opens with a short cross-reference section whose trailer holds /Root and /Prev, the main
    section at the end has only /Size; readers start from the last `startxref`. Here, as some tools leave such a
    file after rewriting its tail, that last `startxref` points at the main section, so a reader following it finds
    an xref without a catalog and nothing telling it to read the first section.
    """
    content = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    bodies = {
        2: b"<< /Type /Catalog /Pages 3 0 R >>",
        3: b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        4: b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 612 792] /Contents 5 0 R"
           b" /Resources << /Font << /F1 6 0 R >> >> >>",
        5: f"<< /Length {len(content)} >>\nstream\n".encode() + content + b"\nendstream",
        6: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    head = b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n"
    linearization = b"1 0 obj\n<< /Linearized 1 /O 4 /N 1 >>\nendobj\n"
    first_xref = len(head) + len(linearization)
    section_bytes = len(b"xref\n1 6\n") + 6 * 20
    trailer = "trailer\n<< /Size 7 /Root 2 0 R /Prev {:010d} >>\nstartxref\n0\n%%EOF\n"
    offset = first_xref + section_bytes + len(trailer.format(0))
    objects, offsets = bytearray(), {1: len(head)}
    for num, body in bodies.items():
        offsets[num] = offset + len(objects)
        objects += f"{num} 0 obj\n".encode() + body + b"\nendobj\n"
    main_xref = offset + len(objects)
    section = b"xref\n1 6\n" + b"".join(f"{offsets[num]:010d} 00000 n \n".encode() for num in range(1, 7))
    tail = f"xref\n0 1\n0000000000 65535 f \ntrailer\n<< /Size 7 >>\nstartxref\n{main_xref}\n%%EOF\n".encode()
    return head + linearization + section + trailer.format(main_xref).encode() + bytes(objects) + tail


def letter_pages(n: int) -> bytes:
    """A PDF of `n` blank US-letter pages, written directly (PyMuPDF's new_page takes ~2 ms a page)."""
    return build_pdf(["/MediaBox [0 0 612 792]"] * n)


def stream_object(content: bytes) -> str:
    """A PDF stream object's text for a content stream (ASCII content only)."""
    return f"<< /Length {len(content)} >>\nstream\n{content.decode('latin-1')}\nendstream"


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width×height RGB pixels but whose data is a few bytes: a pixel bomb."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


def image_bytes(image: Image.Image, fmt: str, **save: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    return buffer.getvalue()


def tiff_pages(sizes: list[tuple[int, int]]) -> bytes:
    """A multi-page TIFF with one solid grey frame per size."""
    frames = [Image.new("L", size, 40 * i) for i, size in enumerate(sizes)]
    return image_bytes(frames[0], "TIFF", save_all=True, append_images=frames[1:])
