"""render: every corpus page renders; pixels map back to page points; caps, raster pages, and per-page failures."""

from __future__ import annotations

import io

import pymupdf
import pytest
from PIL import Image

from pipeline.documents.render import RenderAttempt, RenderedPage, render_page_result
from pipeline.documents.source import Limits, ingest
from tests.documents.samples import (
    CORPUS_PDFS,
    ENCRYPTED_PASSWORD,
    build_pdf,
    corpus_bytes,
    image_bytes,
    stream_object,
    tiff_pages,
)


def render(data: bytes, limits: Limits | None = None, password: str | None = None) -> list[RenderAttempt]:
    with ingest(data, limits or Limits(), password) as document:
        return [render_page_result(source) for source in document.pages()]


def error_codes(results: list[RenderAttempt]) -> list[str | None]:
    return [result.error.code if result.error else None for result in results]


def dark_bbox(page: RenderedPage) -> tuple[int, int, int, int]:
    box = page.image.convert("L").point(lambda v: 255 if v < 128 else 0).getbbox()
    assert box is not None, "nothing dark was rendered"
    return box


# --- the corpus ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS_PDFS)
def test_every_corpus_page_renders(name: str):
    data = corpus_bytes(name)
    source = pymupdf.open(stream=data, filetype="pdf")
    source.authenticate(ENCRYPTED_PASSWORD)
    rendered = render(data, password=ENCRYPTED_PASSWORD)
    assert len(rendered) == source.page_count
    for result, pdf_page in zip(rendered, source, strict=True):
        page = result.page
        assert result.error is None and page is not None
        assert page.image.mode == "RGB"
        assert page.dpi == pytest.approx(200)
        assert (page.width_pt, page.height_pt) == pytest.approx((pdf_page.rect.width, pdf_page.rect.height))
        assert page.width_px == pytest.approx(pdf_page.rect.width * 200 / 72, abs=1)
        assert page.height_px == pytest.approx(pdf_page.rect.height * 200 / 72, abs=1)
        assert page.image.convert("L").getextrema()[0] < 200, "page rendered blank"


def test_rotated_pages_render_as_displayed():
    pages = [result.page for result in render(corpus_bytes("habibi-rotated.pdf"))]
    assert [page.rotation for page in pages] == [90, 180, 270, 0]
    assert [page.width_px > page.height_px for page in pages] == [True, False, True, False]


def test_word_boxes_map_back_to_pymupdf_text_coordinates():
    data = corpus_bytes("habibi-rotated.pdf")
    source = pymupdf.open(stream=data, filetype="pdf")
    for result, pdf_page in zip(render(data), source, strict=True):
        page = result.page
        word = pymupdf.Rect(pdf_page.get_text("words")[0][:4])  # unrotated page space
        on_image = word * pdf_page.rotation_matrix * pymupdf.Matrix(page.scale, page.scale)
        assert page.to_points(tuple(on_image)) == pytest.approx(tuple(word), abs=1e-3)


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_dark_box_found_on_the_image_maps_to_its_page_points(rotation: int):
    pdf = pymupdf.open()
    page = pdf.new_page(width=600, height=800)
    page.draw_rect(pymupdf.Rect(100, 150, 220, 200), color=(0, 0, 0), fill=(0, 0, 0))
    page.set_cropbox(pymupdf.Rect(50, 60, 550, 760))
    page.set_rotation(rotation)
    expected = pymupdf.open(stream=pdf.tobytes(), filetype="pdf")[0].get_drawings()[0]["rect"]
    assert tuple(expected) == pytest.approx((50, 90, 170, 140))  # crop-box relative, unrotated

    (result,) = render(pdf.tobytes())
    found = result.page.to_points(dark_bbox(result.page))
    assert found == pytest.approx(tuple(expected), abs=1.0)
    assert result.page.to_pixels(tuple(expected)) == pytest.approx(dark_bbox(result.page), abs=3.0)  # 1 pt, back
    assert result.page.to_points(result.page.to_pixels(found)) == pytest.approx(found)
    assert (result.page.width_pt, result.page.height_pt) == ((500, 700) if rotation % 180 == 0 else (700, 500))


def test_encrypted_pdf_renders_with_its_password():
    (result,) = render(corpus_bytes("libreoffice-writer-password.pdf"), password=ENCRYPTED_PASSWORD)
    assert result.error is None


# --- the max-pixels cap ------------------------------------------------------------------------------------------


def test_dpi_is_lowered_to_fit_max_render_pixels():
    (result,) = render(corpus_bytes("minimal-document.pdf"), Limits(max_render_pixels=1_000_000))
    page = result.page
    assert page.width_px * page.height_px <= 1_000_000
    assert page.width_px * page.height_px > 990_000
    assert page.dpi < 200
    one_pixel = 1 / page.scale  # MuPDF rounds the pixmap out to whole pixels
    assert page.to_points((0, 0, page.width_px, page.height_px)) == pytest.approx(
        (0, 0, page.width_pt, page.height_pt), abs=one_pixel
    )


@pytest.mark.parametrize("box", ["/MediaBox [0 0 14400 14400] /UserUnit 50", "/MediaBox [0 0 14400 1]"])
def test_huge_or_thin_pages_fit_the_cap(box: str):
    (result,) = render(build_pdf([box]), Limits(max_render_pixels=2_000_000))
    assert result.error is None
    assert result.page.width_px * result.page.height_px <= 2_000_000


# --- raster inputs -----------------------------------------------------------------------------------------------


def test_png_with_recorded_dpi_maps_pixels_at_that_dpi():
    (result,) = render(image_bytes(Image.new("RGB", (600, 300), "white"), "PNG", dpi=(300, 300)))
    page = result.page
    assert (page.width_px, page.height_px, page.dpi) == (600, 300, pytest.approx(300))
    assert (page.width_pt, page.height_pt) == pytest.approx((144, 72))
    assert page.to_points((300, 150, 600, 300)) == pytest.approx((72, 36, 144, 72))


def test_image_without_dpi_assumes_the_configured_dpi():
    (result,) = render(image_bytes(Image.new("RGB", (400, 200), "white"), "PNG"), Limits(dpi=200))
    assert result.page.dpi == 200
    assert result.page.width_pt == pytest.approx(400 * 72 / 200)


def test_transparency_is_flattened_onto_white():
    (result,) = render(image_bytes(Image.new("RGBA", (10, 10), (0, 0, 0, 0)), "PNG"))
    assert result.page.image.mode == "RGB"
    assert result.page.image.getpixel((5, 5)) == (255, 255, 255)


def test_16_bit_grey_tiff_is_scaled_not_clipped():
    (result,) = render(image_bytes(Image.new("I;16", (8, 8), 32768), "TIFF"))
    assert result.page.image.getpixel((0, 0)) == (128, 128, 128)


def test_fax_resolution_pixels_are_squared():
    (result,) = render(image_bytes(Image.new("1", (204, 98), 1), "TIFF", dpi=(204, 98)))
    page = result.page
    assert (page.width_px, page.height_px) == (204, 204)  # one inch square at 204 dpi
    assert (page.width_pt, page.height_pt) == pytest.approx((72, 72))


def test_exif_orientation_is_applied():
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: rotate 90° clockwise to view
    (result,) = render(image_bytes(Image.new("RGB", (300, 100), "white"), "JPEG", exif=exif))
    assert (result.page.width_px, result.page.height_px) == (100, 300)


def test_large_raster_is_downscaled_to_the_cap():
    (result,) = render(
        image_bytes(Image.new("L", (2000, 1000), 255), "PNG", dpi=(400, 400)), Limits(max_render_pixels=500_000)
    )
    page = result.page
    assert page.width_px * page.height_px <= 500_000
    assert (page.width_pt, page.height_pt) == pytest.approx((360, 180))
    assert page.to_points((0, 0, page.width_px, page.height_px)) == pytest.approx((0, 0, 360, 180))


def test_page_image_saves_as_png():
    (result,) = render(corpus_bytes("minimal-document.pdf"), Limits(dpi=50))
    decoded = Image.open(io.BytesIO(result.page.png_bytes()))
    assert decoded.format == "PNG"
    assert decoded.size == result.page.image.size


# --- one bad page does not fail its siblings ---------------------------------------------------------------------


def test_one_oversized_tiff_frame_fails_alone():
    results = render(tiff_pages([(50, 40), (500, 400), (60, 40)]), Limits(max_page_pixels=10_000))
    assert error_codes(results) == [None, "page_too_large", None]


def test_pdf_page_embedding_a_pixel_bomb_fails_alone():
    bomb = "<< /Type /XObject /Subtype /Image /Width 60000 /Height 60000 /BitsPerComponent 8 /ColorSpace /DeviceRGB"
    data = build_pdf(
        [
            "/MediaBox [0 0 612 792]",
            "/MediaBox [0 0 612 792] /Resources << /XObject << /Im1 9 0 R >> >> /Contents 8 0 R",
        ],
        {8: stream_object(b"q 612 0 0 792 0 0 cm /Im1 Do Q"), 9: bomb + " /Length 3 >>\nstream\nabc\nendstream"},
    )
    assert error_codes(render(data, Limits(dpi=50))) == [None, "page_too_large"]


def test_an_unexpected_library_error_on_one_page_becomes_corrupt(monkeypatch: pytest.MonkeyPatch):
    real = pymupdf.Page.get_pixmap

    def flaky(page: pymupdf.Page, *args: object, **kwargs: object) -> pymupdf.Pixmap:
        if page.number == 1:
            raise RuntimeError("simulated MuPDF failure")
        return real(page, *args, **kwargs)

    monkeypatch.setattr(pymupdf.Page, "get_pixmap", flaky)
    results = render(corpus_bytes("pdflatex-4-pages.pdf"), Limits(dpi=30))
    assert error_codes(results) == [None, "corrupt", None, None]
    assert "simulated MuPDF failure" in results[1].error.message


def test_undecodable_pixels_are_corrupt():
    truncated = image_bytes(Image.effect_noise((200, 200), 64).convert("RGB"), "PNG")[:300]
    results = render(truncated)  # the header is intact, so ingest accepts it; decoding the pixels fails
    assert error_codes(results) == ["corrupt"]
