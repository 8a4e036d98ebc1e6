"""The overlay shows each region's box in its label's colour with its order and label, on a copy of the page."""

from __future__ import annotations

from PIL import Image

from pipeline.documents.overlay import colour_for, draw_regions
from pipeline.documents.results import RegionOutput


def test_boxes_are_drawn_in_their_labels_colours_on_a_copy():
    page = Image.new("RGB", (400, 300), (255, 255, 255))
    regions = [RegionOutput(0, "doc_title", 0.9, (20, 20, 380, 60), (0, 0, 1, 1), "ocr", "model"),
               RegionOutput(1, "table", 0.9, (20, 100, 200, 280), (0, 0, 1, 1), "table", "model")]
    overlay = draw_regions(page, regions)
    assert overlay.size == page.size and page.getpixel((20, 40)) == (255, 255, 255)
    assert overlay.getpixel((381, 40)) == colour_for("doc_title")  # just outside the title box's right edge
    assert overlay.getpixel((19, 200)) == colour_for("table")  # just outside the table box's left edge
    inside = overlay.getpixel((110, 200))  # the page shows through a light tint of the table's colour
    assert min(inside) > 200 and inside != (255, 255, 255)
    assert overlay.getpixel((110, 90)) == (255, 255, 255)  # outside every box the page is untouched
    assert colour_for("doc_title") != colour_for("table") != colour_for("text")


def test_the_tag_with_order_and_label_sits_in_the_boxs_top_left_corner():
    page = Image.new("RGB", (400, 300), (255, 255, 255))
    overlay = draw_regions(page, [RegionOutput(7, "text", 0.9, (100, 100, 300, 250), (0, 0, 1, 1), "ocr", "model")])
    corner = {colour for _, colour in overlay.crop((100, 100, 160, 120)).getcolors(4096)}
    assert any(min(colour) > 200 for colour in corner)  # white letters
    assert any(colour[2] > colour[0] + 100 for colour in corner)  # on the text colour (blue), translucent
