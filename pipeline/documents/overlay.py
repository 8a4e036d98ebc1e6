"""Draw a page's regions on a copy of its image: a box per region, tagged with its reading-order number and label.

This is how a person checks layout and reading order at a glance, so colours group labels by kind (text, titles,
tables, formulas, pictures, page furniture) and the tag sits inside the box's top-left corner, where it cannot
drift onto a neighbour's.
"""

from __future__ import annotations

from PIL import Image, ImageDraw, ImageFont

from pipeline.documents.results import RegionOutput

_COLOURS = {
    "title": (220, 40, 40),
    "table": (20, 150, 60),
    "formula": (140, 50, 200),
    "picture": (240, 130, 0),
    "furniture": (130, 130, 130),
    "text": (30, 90, 220),
}
_TINT = 28  # alpha of the fill inside a box
_TAG_ALPHA = 190  # alpha of the tag's background
_KINDS = {
    "doc_title": "title", "paragraph_title": "title", "table": "table", "display_formula": "formula",
    "inline_formula": "formula", "formula_number": "formula", "image": "picture", "chart": "picture",
    "seal": "picture", "header_image": "furniture", "footer_image": "furniture", "header": "furniture",
    "footer": "furniture", "number": "furniture",
}


def colour_for(label: str) -> tuple[int, int, int]:
    """The RGB colour a label is drawn in."""
    return _COLOURS[_KINDS.get(label, "text")]


def draw_regions(image: Image.Image, regions: list[RegionOutput]) -> Image.Image:
    """A copy of `image` with each region tinted, outlined just outside its box, and tagged with order and label.

    The outline sits outside the box and the tint and tag are translucent, so the glyphs at a tight box's edge
    and under the tag stay readable.
    """
    layer = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    width = max(2, round(min(image.size) / 300))
    font = ImageFont.load_default(size=max(12, round(min(image.size) / 60)))
    for region in regions:
        colour = colour_for(region.label)
        x0, y0, x1, y1 = region.bbox_px
        draw.rectangle((x0, y0, x1, y1), fill=(*colour, _TINT))
        draw.rectangle((x0 - width, y0 - width, x1 + width, y1 + width), outline=(*colour, 255), width=width)
        tag = f"{region.order} {region.label}"
        left, top, right, bottom = draw.textbbox((x0, y0), tag, font=font)
        draw.rectangle((left - 2, top - 2, right + 2, bottom + 2), fill=(*colour, _TAG_ALPHA))
        draw.text((x0, y0), tag, fill=(255, 255, 255, 255), font=font)
    return Image.alpha_composite(image.convert("RGBA"), layer).convert("RGB")
