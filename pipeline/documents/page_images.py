"""A page's PNGs for a writer: the page image, its overlay of regions and the crops of its pictures.

PNG encoding is most of a page's CPU work (40-80 ms for a 200-dpi page here, twice per page with its overlay),
so it is done where the page was laid out, in a page worker (page_pool.py), and the process that holds the engine
only writes the bytes (outputs.py).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from PIL import Image

from pipeline.documents.overlay import draw_regions
from pipeline.documents.regions import crop, crop_box
from pipeline.documents.render import RenderedPage
from pipeline.documents.results import RegionOutput


@dataclass(frozen=True)
class PageImages:
    page: bytes
    overlay: bytes
    pictures: dict[int, bytes] = field(default_factory=dict)  # region order → PNG of a picture region's crop


def encode_page_images(page: RenderedPage, regions: list[RegionOutput], margin_pt: float) -> PageImages:
    """The page, its overlay and each picture region's crop (grown by `margin_pt`, as recognition crops are)."""
    pictures = {}
    for region in regions:
        box = crop_box(page, region.bbox_px, margin_pt) if region.task is None else None
        if box is not None:
            pictures[region.order] = picture_png(crop(page, box))
    return PageImages(page_png(page.image), page_png(draw_regions(page.image, regions)), pictures)


def page_png(image: Image.Image) -> bytes:
    """A whole page, lossless, at zlib's fastest level, as the service stores its page images: over the corpus's pages
    at 200 dpi the files are 12 % larger than at the default level, and written in 55-60 % of the time."""
    return _png(image, compress_level=1)


def picture_png(image: Image.Image) -> bytes:
    """A picture region's crop, with PIL's default PNG settings: the service serves the same bytes for it."""
    return _png(image)


def _png(image: Image.Image, **options: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **options)
    return buffer.getvalue()
