"""ingest(): formats by content, limits, and a stable error code for every bad input (and nothing else raised)."""

from __future__ import annotations

import hashlib
import io
import pickle
import random
import zipfile

import pymupdf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pipeline.documents.errors import ERROR_CODES, DocumentError
from pipeline.documents.render import render_page_result
from pipeline.documents.source import Limits, ingest, sniff
from tests.documents.samples import (
    CORPUS_PDFS,
    ENCRYPTED,
    ENCRYPTED_PASSWORD,
    build_pdf,
    corpus_bytes,
    image_bytes,
    letter_pages,
    linearized_pdf,
    png_header,
    tiff_pages,
)


def error_code(data: bytes, limits: Limits | None = None, password: str | None = None) -> str:
    with pytest.raises(DocumentError) as caught:
        ingest(data, limits or Limits(), password)
    return caught.value.code


# --- the corpus: files this project did not make ----------------------------------------------------------------


def test_corpus_is_present():
    assert len(CORPUS_PDFS) == 9


@pytest.mark.parametrize("name", [name for name in CORPUS_PDFS if name != ENCRYPTED])
def test_corpus_pdf_ingests_with_pymupdf_page_count(name: str):
    data = corpus_bytes(name)
    with ingest(data, Limits()) as document:
        assert document.media_type == "application/pdf"
        assert document.sha256 == hashlib.sha256(data).hexdigest()
        assert document.size == len(data)
        assert document.page_count == pymupdf.open(stream=data, filetype="pdf").page_count
        assert [page.index for page in document.pages()] == list(range(document.page_count))


def test_encrypted_pdf_needs_its_password():
    data = corpus_bytes(ENCRYPTED)
    assert error_code(data) == "encrypted"
    assert error_code(data, password="not-the-password") == "encrypted"
    with ingest(data, Limits(), password=ENCRYPTED_PASSWORD) as document:
        assert document.page_count == 1


def test_password_is_ignored_for_an_unencrypted_pdf():
    with ingest(corpus_bytes("minimal-document.pdf"), Limits(), password="anything") as document:
        assert document.page_count == 1


# --- formats come from content ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("TIFF", "image/tiff")],
)
def test_raster_formats_are_sniffed(fmt: str, media_type: str):
    data = image_bytes(Image.new("RGB", (64, 48), "white"), fmt)
    with ingest(data, Limits()) as document:
        assert (document.media_type, document.page_count) == (media_type, 1)


def test_multipage_tiff_has_a_page_per_frame():
    with ingest(tiff_pages([(30, 20), (40, 20), (50, 20)]), Limits()) as document:
        assert document.page_count == 3
        assert [document.load_page(i).size for i in range(3)] == [(30, 20), (40, 20), (50, 20)]


def test_pdf_header_after_leading_junk_is_still_a_pdf():
    assert sniff(b"junk\r\n" + corpus_bytes("minimal-document.pdf")) == "application/pdf"


def test_gif_is_not_accepted_even_though_pillow_reads_it():
    assert error_code(image_bytes(Image.new("P", (8, 8)), "GIF")) == "unsupported_format"


# --- bad inputs: each gets its code ----------------------------------------------------------------------------


def zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    return buffer.getvalue()


def test_random_bytes_are_unsupported():
    assert error_code(random.Random(0).randbytes(4096)) == "unsupported_format"


def test_html_named_pdf_is_unsupported(tmp_path):
    path = tmp_path / "invoice.pdf"  # the name says PDF; the content decides
    path.write_bytes(b"<!DOCTYPE html>\n<html><body><h1>Login</h1></body></html>\n")
    with pytest.raises(DocumentError) as caught:
        ingest(path.read_bytes(), Limits())
    assert caught.value.code == "unsupported_format"
    assert "HTML" in caught.value.message


def test_zip_is_unsupported():
    assert error_code(zip_bytes()) == "unsupported_format"


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_truncated_pdf_is_corrupt(fraction: float):
    data = corpus_bytes("pdflatex-4-pages.pdf")
    assert error_code(data[: int(len(data) * fraction)]) == "corrupt"


def test_pdf_header_then_garbage_is_corrupt():
    assert error_code(b"%PDF-1.7\n" + random.Random(1).randbytes(2048)) == "corrupt"


def test_zero_page_pdf_is_empty():
    data = build_pdf([])
    assert pymupdf.open(stream=data, filetype="pdf").page_count == 0  # well formed, as MuPDF sees it
    assert error_code(data) == "empty"


def test_linearized_pdf_read_from_its_main_xref_opens_with_its_pages():
    data = linearized_pdf("Read from the first trailer")
    assert pymupdf.open(stream=data, filetype="pdf").page_count == 0  # MuPDF follows the last startxref only
    with ingest(data, Limits()) as document:
        assert document.page_count == 1
        assert "Read from the first trailer" in document.load_page(0).get_text()


def test_zero_bytes_are_empty():
    assert error_code(b"") == "empty"


def test_file_over_the_byte_limit_is_too_large():
    data = corpus_bytes("minimal-document.pdf")
    assert error_code(data, Limits(max_file_bytes=len(data) - 1)) == "file_too_large"


def test_10000_pages_against_2000_is_too_many():
    assert error_code(letter_pages(10_000), Limits(max_pages=2000)) == "too_many_pages"


def test_tiff_with_too_many_frames():
    assert error_code(tiff_pages([(8, 8)] * 3), Limits(max_pages=2)) == "too_many_pages"


def test_pixel_bomb_png_is_page_too_large_without_allocating():
    # 60000 × 60000 = 3.6 Gpx: Pillow's own DecompressionBombError fires in Image.open and is mapped.
    assert error_code(png_header(60_000, 60_000)) == "page_too_large"


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_image_over_our_limit_but_under_pillows_is_page_too_large():
    # 121 Mpx: over Limits.max_page_pixels (100 M), under Pillow's error threshold (~179 M): our header check.
    assert error_code(png_header(11_000, 11_000)) == "page_too_large"


def test_pixel_limit_is_configurable():
    data = image_bytes(Image.new("RGB", (200, 100)), "PNG")
    assert error_code(data, Limits(max_page_pixels=19_999)) == "page_too_large"
    with ingest(data, Limits(max_page_pixels=20_000)) as document:
        assert document.page_count == 1


def test_png_signature_then_garbage_is_corrupt():
    assert error_code(b"\x89PNG\r\n\x1a\n" + random.Random(2).randbytes(100)) == "corrupt"


# --- never anything but DocumentError --------------------------------------------------------------------------

MAGIC_PREFIXES = [
    b"",
    b"%PDF-1.4\n",
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",
    b"RIFF\0\0\0\0WEBP",
    b"II*\x00",
    b"MM\x00*",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from(MAGIC_PREFIXES), body=st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_document_errors(prefix: bytes, body: bytes):
    ingest_and_render(prefix + body)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_damaged_real_pdf_raises_only_document_errors(seed: int):
    rng = random.Random(seed)
    data = bytearray(corpus_bytes("pdflatex-4-pages.pdf"))
    for _ in range(rng.randint(1, 30)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    ingest_and_render(bytes(data[: rng.randint(len(data) // 2, len(data))]))


def ingest_and_render(data: bytes) -> None:
    """Either a DocumentError with a known code, or a document whose pages each render or carry a code."""
    try:
        document = ingest(data, Limits(dpi=20))
    except DocumentError as exc:
        assert exc.code in ERROR_CODES
        return
    with document:
        for source in document.pages():
            error = render_page_result(source).error
            assert error is None or error.code in ERROR_CODES


# --- the error type --------------------------------------------------------------------------------------------


def test_document_error_survives_pickling():
    error = pickle.loads(pickle.dumps(DocumentError("encrypted", "needs a password")))
    assert (error.code, error.message, str(error)) == ("encrypted", "needs a password", "encrypted: needs a password")


def test_unknown_error_code_is_a_programming_error():
    with pytest.raises(ValueError):
        DocumentError("bad_vibes", "no")  # type: ignore[arg-type]
