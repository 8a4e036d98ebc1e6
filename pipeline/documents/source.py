"""Validate an uploaded file and open it as a document of pages, before any rendering.

Everything that can be decided cheaply from the bytes is decided here, so a bad upload fails fast with a stable
error code (see errors.py) and never reaches a render or GPU worker: the format comes from the content (magic
bytes), never from the file name or the client's Content-Type; size, page count and pixel-bomb limits are
checked from headers, without decoding pixels. Rendering, which can still fail for one page, is render.py's job.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import pymupdf
from PIL import Image

from pipeline.documents.errors import DocumentError

MediaType = Literal["application/pdf", "image/tiff", "image/png", "image/jpeg", "image/webp"]

# Raster media types → the one Pillow plugin allowed to open them (so Pillow never guesses another format).
_PIL_FORMATS: dict[str, str] = {"image/tiff": "TIFF", "image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}

# Acrobat accepts a PDF header anywhere in the first 1024 bytes (some producers prepend junk); so do we.
SNIFF_BYTES = 1024  # what a caller reads for sniff()
FORMATS = "a PDF, TIFF, PNG, JPEG or WebP image"  # what sniff() recognises, for messages


@dataclass(frozen=True)
class Limits:
    """Resource limits for one document; the defaults suit a multi-tenant service.

    max_page_pixels guards against pixel bombs (a tiny file that claims a huge image) and is checked from
    headers before decoding; max_render_pixels caps the rendered page image (a PDF page is rendered at a lower
    DPI, a raster page downscaled, until it fits), which bounds worker memory and recognizer input size.
    """

    max_file_bytes: int = 200 * 1024 * 1024
    max_pages: int = 2000
    max_page_pixels: int = 100_000_000
    dpi: int = 200
    max_render_pixels: int = 40_000_000


@dataclass(frozen=True, eq=False)
class SourcePage:
    """One not-yet-rendered page; load() may fail for this page alone, which is why it is lazy."""

    document: IngestedDocument
    index: int

    def load(self) -> pymupdf.Page | Image.Image:
        """The PyMuPDF page (PDF) or the decoded-on-demand PIL frame (raster) for this page."""
        return self.document.load_page(self.index)


@dataclass
class IngestedDocument:
    """A validated document: what it is, its content hash, and its pages.

    Holds an open PyMuPDF document or PIL image, so close it (or use it as a context manager). Not thread-safe:
    PyMuPDF documents and PIL's multi-frame seek are both per-thread objects; give each worker its own.
    """

    media_type: MediaType
    sha256: str
    size: int
    page_count: int
    limits: Limits
    _pdf: pymupdf.Document | None = field(default=None, repr=False)
    _image: Image.Image | None = field(default=None, repr=False)

    @property
    def is_pdf(self) -> bool:
        return self._pdf is not None

    def pages(self) -> Iterator[SourcePage]:
        """Each page in order, as a lazy handle (nothing is decoded until it is loaded)."""
        for index in range(self.page_count):
            yield SourcePage(self, index)

    def load_page(self, index: int) -> pymupdf.Page | Image.Image:
        """The PyMuPDF page, or for rasters a copy of frame `index` (frames of a TIFF may differ in size).

        Raises DocumentError(page_too_large) for a frame over the pixel limit, checked before it is decoded.
        """
        if not 0 <= index < self.page_count:
            raise IndexError(f"page {index} out of range 0..{self.page_count - 1}")
        if self._pdf is not None:
            return self._pdf.load_page(index)
        if self._image is None:
            raise ValueError("document is closed")
        image = self._image
        if self.page_count > 1:
            image.seek(index)
        _check_pixels(image.size, self.limits)
        return image.copy()  # copy() decodes this frame and detaches it from the shared seek position

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()
            self._pdf = None
        if self._image is not None:
            self._image.close()
            self._image = None

    def __enter__(self) -> IngestedDocument:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sniff(data: bytes) -> MediaType | None:
    """The media type from magic bytes alone, or None when it is not a format Quire reads."""
    head = data[:16]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # classic TIFF and BigTIFF
        return "image/tiff"
    if b"%PDF-" in data[:SNIFF_BYTES]:
        return "application/pdf"
    return None


def ingest(data: bytes, limits: Limits | None = None, password: str | None = None) -> IngestedDocument:
    """Validate `data` and open it; raise DocumentError with a stable code for any bad input, nothing else.

    `password` opens an encrypted PDF (a user or owner password); it is ignored for anything else.
    """
    limits = limits or Limits()
    if len(data) > limits.max_file_bytes:
        raise DocumentError("file_too_large", f"file is {len(data)} bytes; the limit is {limits.max_file_bytes}")
    if not data:
        raise DocumentError("empty", "file is empty (0 bytes)")
    media_type = sniff(data)
    if media_type is None:
        raise DocumentError("unsupported_format", f"not a PDF, TIFF, PNG, JPEG or WebP file{_describe(data)}")
    sha256 = hashlib.sha256(data).hexdigest()
    if media_type == "application/pdf":
        pdf, page_count = _open_pdf(data, password)
        try:
            _check_page_count(page_count, limits)
        except DocumentError:
            pdf.close()
            raise
        return IngestedDocument(media_type, sha256, len(data), page_count, limits, _pdf=pdf)
    image, page_count = _open_raster(data, media_type)
    try:
        _check_page_count(page_count, limits)
        if page_count == 1:  # one page: a too-large page is a too-large document; in a TIFF, only that page fails
            _check_pixels(image.size, limits)
    except DocumentError:
        image.close()
        raise
    return IngestedDocument(media_type, sha256, len(data), page_count, limits, _image=image)


def _open_pdf(data: bytes, password: str | None) -> tuple[pymupdf.Document, int]:
    try:
        pdf = pymupdf.open(stream=data, filetype="pdf")  # MuPDF repairs a broken xref here when it can
    except Exception as exc:
        raise DocumentError("corrupt", f"PDF cannot be opened, even after repair: {exc}") from exc
    try:
        if pdf.needs_pass:
            if password is None:
                raise DocumentError("encrypted", "PDF is encrypted and needs a password")
            if not pdf.authenticate(password):
                raise DocumentError("encrypted", "PDF is encrypted and the password given does not open it")
        page_count = _page_count(pdf)
    except DocumentError:
        pdf.close()
        raise
    return pdf, page_count


def _page_count(pdf: pymupdf.Document) -> int:
    """The page count, after rebuilding the xref from the file's objects when the one MuPDF read shows no pages.

    A linearized file's catalog may be named only in its first-page trailer; when its last `startxref` points at
    the main section, whose trailer has no /Root, MuPDF reads a valid xref without a catalog and sees no pages,
    repairing nothing. Its repair (the scan it runs on a broken xref) finds the catalog, as other readers do.
    """
    try:
        page_count = pdf.page_count
        damaged = pdf.is_repaired
        if page_count == 0 and not damaged:
            pymupdf.mupdf.pdf_repair_xref(pymupdf.mupdf.pdf_document_from_fz_document(pdf.this))
            page_count = pdf.page_count
    except Exception as exc:
        raise DocumentError("corrupt", f"PDF page tree cannot be read: {exc}") from exc
    if page_count == 0:
        # A file MuPDF had to repair with no pages left is broken (e.g. truncated), not an empty document.
        if damaged:
            raise DocumentError("corrupt", "PDF is damaged (truncated?) and no page could be recovered")
        raise DocumentError("empty", "PDF has no pages")
    return page_count


def _open_raster(data: bytes, media_type: str) -> tuple[Image.Image, int]:
    try:
        # Image.open reads only the header (size, mode); pixels are decoded on load(), after our checks.
        image = Image.open(io.BytesIO(data), formats=[_PIL_FORMATS[media_type]])
    except Image.DecompressionBombError as exc:  # Pillow's own guard (2 × Image.MAX_IMAGE_PIXELS) fired first
        raise DocumentError("page_too_large", f"image is too large: {exc}") from exc
    except Exception as exc:
        raise DocumentError("corrupt", f"{media_type} image cannot be read: {exc}") from exc
    try:
        # Only a TIFF is a multi-page document; animated PNG/WebP frames are not pages, the first frame is used.
        page_count = int(getattr(image, "n_frames", 1)) if media_type == "image/tiff" else 1
        if page_count > 1:
            image.seek(0)
    except Exception as exc:
        image.close()
        raise DocumentError("corrupt", f"TIFF page directory cannot be read: {exc}") from exc
    return image, page_count


def _check_page_count(page_count: int, limits: Limits) -> None:
    if page_count > limits.max_pages:
        raise DocumentError("too_many_pages", f"document has {page_count} pages; the limit is {limits.max_pages}")


def _check_pixels(size: tuple[int, int], limits: Limits) -> None:
    width, height = size
    if width <= 0 or height <= 0:
        raise DocumentError("corrupt", f"image has an impossible size {width}×{height}")
    if width * height > limits.max_page_pixels:
        raise DocumentError(
            "page_too_large", f"page is {width}×{height} pixels; the limit is {limits.max_page_pixels} pixels"
        )


def _describe(data: bytes) -> str:
    """A hint for the error message about what the unsupported file probably is."""
    head = data[:512].lstrip().lower()
    if data.startswith(b"PK\x03\x04"):
        return " (it looks like a ZIP archive, e.g. DOCX/XLSX)"
    if head.startswith((b"<!doctype html", b"<html", b"<?xml", b"<")):
        return " (it looks like HTML/XML text)"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return " (it looks like a GIF image)"
    if data.startswith(b"BM"):
        return " (it looks like a BMP image)"
    return ""
