"""Turn each page of an ingested document into an RGB image for layout and recognition.

Every page image remembers how its pixels map back to page points, so region boxes found on the image can be
stored in the page's own coordinates (and used, for instance, as a clip for PyMuPDF's text layer). A page that
cannot be rendered becomes a RenderAttempt with an error code rather than an exception, so its siblings still
render and one bad page fails alone.

Coordinates. For a PDF, points are PyMuPDF's page space: the *unrotated* page, origin at the crop box's top
left, y pointing down, 1/72 inch units (what `page.get_text("words")` returns and `clip=` accepts); the image is
the page as displayed, i.e. with /Rotate applied and cut to the crop box. For a raster page, points are
`pixels * 72 / dpi` from the original image's top left, where dpi is the resolution recorded in the file when it
is plausible, else `Limits.dpi` (an assumption: a bare PNG does not know its physical size).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import pymupdf
from PIL import Image, ImageOps

from pipeline.documents.errors import DocumentError
from pipeline.documents.source import Limits, SourcePage

Matrix6 = tuple[float, float, float, float, float, float]  # (a, b, c, d, e, f): x' = a x + c y + e, y' = b x + d y + f

_PLAUSIBLE_DPI = (36.0, 4800.0)  # resolution tags outside this range (0, 1, 72000) are treated as absent
_EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True)
class RenderedPage:
    """One page as an RGB image, with what is needed to map its pixels back to page points."""

    index: int
    image: Image.Image
    width_pt: float  # the page as displayed (rotated, cropped), in points
    height_pt: float
    dpi: float  # effective resolution of `image` (lower than asked when the max-pixels cap applied)
    rotation: int  # the page's /Rotate (0, 90, 180, 270); 0 for raster pages (EXIF orientation is applied)
    px_to_pt: Matrix6  # pixel coordinates of `image` → page points (see module docstring for the space)

    @property
    def width_px(self) -> int:
        return self.image.width

    @property
    def height_px(self) -> int:
        return self.image.height

    @property
    def scale(self) -> float:
        """Pixels per point (dpi / 72)."""
        return self.dpi / 72.0

    def to_points(self, bbox_px: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        """A pixel box (x0, y0, x1, y1) on `image` → the box in page points, normalised so x0 <= x1, y0 <= y1."""
        x0, y0, x1, y1 = bbox_px
        a, b, c, d, e, f = self.px_to_pt
        xs, ys = [], []
        for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
            xs.append(a * x + c * y + e)
            ys.append(b * x + d * y + f)
        return (min(xs), min(ys), max(xs), max(ys))

    def to_pixels(self, bbox_pt: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        """A box in page points (PyMuPDF's space) → the pixel box on `image`; the inverse of `to_points`.

        Layout backends that read the PDF's own structure get boxes in page points and need them on the image.
        """
        x0, y0, x1, y1 = bbox_pt
        a, b, c, d, e, f = self.px_to_pt
        det = a * d - b * c
        xs, ys = [], []
        for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
            x, y = x - e, y - f
            xs.append((d * x - c * y) / det)
            ys.append((a * y - b * x) / det)
        return (min(xs), min(ys), max(xs), max(ys))

    def png_bytes(self) -> bytes:
        """The page image encoded as PNG (lossless, so OCR sees exactly what was rendered)."""
        buffer = io.BytesIO()
        self.image.save(buffer, format="PNG")
        return buffer.getvalue()


@dataclass(frozen=True)
class RenderAttempt:
    """One page's render: the image, or the error that stopped it."""

    index: int
    page: RenderedPage | None = None
    error: DocumentError | None = None


def render_page_result(source: SourcePage) -> RenderAttempt:
    """Render one page and never raise: any failure becomes the page's error (unknown ones are `corrupt`)."""
    try:
        return RenderAttempt(source.index, page=render_page(source))
    except DocumentError as exc:
        return RenderAttempt(source.index, error=exc)
    except Exception as exc:  # MuPDF and Pillow raise many types for damaged content; all mean a bad page
        error = DocumentError("corrupt", f"page {source.index + 1} cannot be rendered: {type(exc).__name__}: {exc}")
        return RenderAttempt(source.index, error=error)


def render_page(source: SourcePage) -> RenderedPage:
    """Render one page under the document's limits; raises DocumentError (or the library's error) on failure."""
    limits = source.document.limits
    loaded = source.load()
    if isinstance(loaded, pymupdf.Page):
        return _render_pdf_page(source.index, loaded, limits)
    return _render_raster(source.index, loaded, limits)


def _render_pdf_page(index: int, page: pymupdf.Page, limits: Limits) -> RenderedPage:
    rect = page.rect  # crop box, rotated: the page as a viewer shows it
    if not (rect.width > 0 and rect.height > 0 and math.isfinite(rect.width * rect.height)):
        raise DocumentError("corrupt", f"page {index + 1} has an empty or invalid crop box {tuple(rect)}")
    _check_embedded_images(index, page, limits)
    zoom = _fit_zoom(rect, limits.dpi / 72.0, limits.max_render_pixels)
    pixmap = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), colorspace=pymupdf.csRGB, alpha=False)
    image = Image.frombytes("RGB", (pixmap.width, pixmap.height), pixmap.samples, "raw", "RGB", pixmap.stride)
    # pixel → displayed point (undo the offset and zoom), then displayed → unrotated page space.
    to_points = pymupdf.Matrix(1, 0, 0, 1, pixmap.x, pixmap.y) * pymupdf.Matrix(1 / zoom, 1 / zoom)
    to_points *= page.derotation_matrix
    return RenderedPage(
        index=index,
        image=image,
        width_pt=rect.width,
        height_pt=rect.height,
        dpi=zoom * 72.0,
        rotation=page.rotation,
        px_to_pt=tuple(to_points),  # type: ignore[arg-type]
    )


def _fit_zoom(rect: pymupdf.Rect, zoom: float, max_pixels: int) -> float:
    """The asked zoom, lowered until the rendered pixmap (after MuPDF's rounding out) holds at most max_pixels."""

    def pixels(z: float) -> int:
        box = (rect * pymupdf.Matrix(z, z)).irect
        return box.width * box.height

    if pixels(zoom) <= max_pixels:
        return zoom
    zoom = math.sqrt(max_pixels / (rect.width * rect.height))
    while pixels(zoom) > max_pixels and zoom > 1e-6:  # rounding out can add a row and a column
        zoom *= 0.999
    return zoom


def _check_embedded_images(index: int, page: pymupdf.Page, limits: Limits) -> None:
    """Refuse a page whose image XObjects (also inside forms) claim more pixels than the pixel-bomb limit.

    MuPDF decodes an image at full size before scaling it down, so a small flate stream that claims
    60000×60000 pixels would take ~10 GB however low we set the DPI. Inline images are not covered.
    """
    for image_info in page.get_images(full=True):
        width, height = image_info[2], image_info[3]
        if width * height > limits.max_page_pixels:
            raise DocumentError(
                "page_too_large",
                f"page {index + 1} embeds a {width}×{height} image; the limit is {limits.max_page_pixels} pixels",
            )


def _render_raster(index: int, frame: Image.Image, limits: Limits) -> RenderedPage:
    dpi_x, dpi_y = _image_dpi(frame, limits.dpi)
    if frame.getexif().get(_EXIF_ORIENTATION, 1) in (5, 6, 7, 8):  # the transpose below turns it a quarter
        dpi_x, dpi_y = dpi_y, dpi_x
    frame = ImageOps.exif_transpose(frame)  # a photographed page stored sideways becomes upright
    image = _to_rgb(frame)
    width_pt, height_pt = image.width * 72.0 / dpi_x, image.height * 72.0 / dpi_y
    # Square the pixels (a fax is often 204×98 dpi) at the higher resolution, then apply the max-pixels cap.
    dpi = max(dpi_x, dpi_y)
    target_w, target_h = image.width * dpi / dpi_x, image.height * dpi / dpi_y
    if target_w * target_h > limits.max_render_pixels:
        shrink = math.sqrt(limits.max_render_pixels / (target_w * target_h))
        target_w, target_h, dpi = target_w * shrink, target_h * shrink, dpi * shrink
    size = (max(1, math.floor(target_w)), max(1, math.floor(target_h)))
    if size != image.size:
        image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    return RenderedPage(
        index=index,
        image=image,
        width_pt=width_pt,
        height_pt=height_pt,
        dpi=dpi,
        rotation=0,
        px_to_pt=(width_pt / image.width, 0.0, 0.0, height_pt / image.height, 0.0, 0.0),
    )


def _image_dpi(image: Image.Image, default: float) -> tuple[float, float]:
    """The (x, y) resolution recorded in the image when plausible, else (default, default)."""
    recorded = image.info.get("dpi")
    try:
        dpi_x, dpi_y = float(recorded[0]), float(recorded[1])  # type: ignore[index]
    except (TypeError, ValueError, IndexError):
        return (float(default), float(default))
    low, high = _PLAUSIBLE_DPI
    if not (low <= dpi_x <= high and low <= dpi_y <= high):
        return (float(default), float(default))
    return (round(dpi_x, 2), round(dpi_y, 2))  # PNG stores dots per metre: 300 dpi reads back as 299.9994


def _to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB: transparency flattened onto white (a scanned form's background), 16-bit grey scaled down."""
    if image.mode == "RGB":
        return image
    if image.mode in ("I;16", "I;16L", "I;16B", "I;16N"):
        return image.convert("I").point(lambda value: value / 256).convert("L").convert("RGB")
    if image.mode in ("I", "F"):
        low, high = image.getextrema()
        span = (high - low) or 1
        return image.convert("F").point(lambda value: (value - low) * 255.0 / span).convert("L").convert("RGB")
    if image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")
