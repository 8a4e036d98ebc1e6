"""Layout: the pdf backend on real PDFs, pp-doclayout on tiny random checkpoints, auto's choice, the registry."""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pymupdf
import pytest
import torch
from PIL import Image

from pipeline.config import Settings
from pipeline.documents.layout import AutoLayout, detect_many, layout_backend
from pipeline.documents.layout_contract import LABELS, DetectedRegion
from pipeline.documents.layout_model import (
    PADDLE_CLASSES,
    Detection,
    PPDocLayout,
    filter_overlaps,
    quire_labels,
    reading_ranks,
)
from pipeline.documents.layout_order import xy_cut_order
from pipeline.documents.layout_page import PageLayout
from pipeline.documents.layout_pdf import PdfLayout
from pipeline.documents.layout_weights import LayoutModelUnavailable, local_layout_weights
from pipeline.documents.process import ProcessOptions
from pipeline.documents.regions import RegionOptions
from pipeline.documents.render import RenderedPage, render_page
from pipeline.documents.source import IngestedDocument, Limits, SourcePage, ingest
from pipeline.documents.stream import process_document
from pipeline.documents.tiny_layout import HUB_CLASS_NAMES, TinyLayoutSpec
from tests.documents.answers import Answers
from tests.documents.born_digital import synthetic_page, vector_plot
from tests.documents.samples import CORPUS_PDFS, ENCRYPTED_PASSWORD, corpus_bytes, image_bytes

DPI = 100  # enough for every heuristic, and quick to render


def pages_of(data: bytes, dpi: int = DPI) -> tuple[IngestedDocument, list[tuple[RenderedPage, SourcePage]]]:
    document = ingest(data, Limits(dpi=dpi), password=ENCRYPTED_PASSWORD)
    return document, [(render_page(source), source) for source in document.pages()]


def assert_well_formed(regions: list[DetectedRegion], page: RenderedPage) -> None:
    assert [region.order for region in regions] == list(range(len(regions)))
    for region in regions:
        x0, y0, x1, y1 = region.bbox
        assert 0 <= x0 < x1 <= page.width_px and 0 <= y0 < y1 <= page.height_px, region
        assert region.label in LABELS
        assert 0 < region.score <= 1


def words_in(page: RenderedPage, source: SourcePage, region: DetectedRegion) -> str:
    """The PDF's own text under a region (via the box mapped back to points): what the region holds."""
    pdf_page = source.load()
    return " ".join(pdf_page.get_textbox(pymupdf.Rect(page.to_points(region.bbox))).split())


# --- pdf: every corpus page --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS_PDFS)
def test_pdf_backend_gives_well_formed_regions_on_every_corpus_page(name: str):
    document, pages = pages_of(corpus_bytes(name))
    with document:
        for page, source in pages:
            regions = PdfLayout().detect(page, source)
            assert regions, f"{name} page {source.index + 1}: no region"
            assert_well_formed(regions, page)


@pytest.mark.slow
def test_multicolumn_pages_read_column_by_column():
    document, pages = pages_of(corpus_bytes("multicolumn.pdf"))
    with document:
        (page, source), (page2, source2) = pages[0], pages[1]
        first = [(region.label, words_in(page, source, region)[:20]) for region in PdfLayout().detect(page, source)]
        second = [words_in(page2, source2, region)[:12] for region in PdfLayout().detect(page2, source2)]
    assert first == [
        ("doc_title", "Two-Column Document "),
        ("text", "Your Name"),
        ("text", "January 3, 2024"),
        ("paragraph_title", "Abstract"),
        ("text", "This is a sample doc"),
        ("text", "Lorem ipsum dolor si"),
        ("text", "Nam dui ligula, frin"),
        ("text", "Nulla malesuada port"),
        ("text", "pellentesque ante. P"),  # the right column starts only after the left one ends
        ("text", "Quisque ullamcorper "),
        ("text", "Fusce mauris. Vestib"),
        ("number", "1"),
    ]
    assert second == ["lacus vel es", "Suspendisse ", "Sed commodo ", "Pellentesque", "Morbi luctus",
                      "luctus et ul", "Suspendisse ", "2"]


def test_booktabs_table_is_one_table_with_its_caption_before_it():
    document, pages = pages_of(corpus_bytes("multicolumn.pdf"))
    with document:
        page, source = pages[2]
        regions = PdfLayout().detect(page, source)
        caption, table = regions[0], regions[1]
        assert (caption.label, words_in(page, source, caption)) == ("figure_title", "Table 1: EU Countries Information")
        assert table.label == "table"
        assert "Austria" in words_in(page, source, table) and "Country" in words_in(page, source, table)
        assert [region.label for region in regions] == ["figure_title", "table", "number"]


def test_google_doc_page_has_title_text_picture_ruled_table_and_footnotes():
    document, pages = pages_of(corpus_bytes("google-doc-document.pdf"))
    with document:
        page, source = pages[0]
        regions = PdfLayout().detect(page, source)
        labels = [region.label for region in regions]
        assert labels == ["doc_title", "text", "image", "table", "footnote", "footnote", "footnote"]
        table = regions[3]
        assert "Jakarta" in words_in(page, source, table)  # the cells are inside the table, not text regions
        assert not any("Jakarta" in words_in(page, source, region) for region in regions if region is not table)


def test_image_page_reads_heading_text_picture_text_then_page_number():
    document, pages = pages_of(corpus_bytes("pdflatex-image.pdf"))
    with document:
        regions = PdfLayout().detect(*pages[0])
    assert [region.label for region in regions] == ["doc_title", "text", "image", "text", "number"]


def test_rotated_page_boxes_land_on_the_rendered_text():
    document, pages = pages_of(corpus_bytes("habibi-rotated.pdf"))
    with document:
        for page, source in pages:
            (region,) = PdfLayout().detect(page, source)
            ink = page.image.convert("L").point(lambda v: 255 if v < 128 else 0).getbbox()
            x0, y0, x1, y1 = region.bbox
            assert x0 - 2 <= ink[0] and y0 - 2 <= ink[1] and ink[2] <= x1 + 2 and ink[3] <= y1 + 2, (page.rotation, ink)
            block = source.load().get_text("blocks")[0][:4]  # unrotated page points
            assert page.to_points(region.bbox) == pytest.approx(block, abs=0.5)


@pytest.mark.parametrize("name", ["grayscale-image.pdf", "imagemagick-CCITTFaxDecode.pdf"])
def test_scanned_pdf_page_is_one_whole_page_text_region(name: str):
    document, pages = pages_of(corpus_bytes(name))
    with document:
        page, source = pages[0]
        assert PdfLayout().detect(page, source) == PageLayout().detect(page, source)


def test_raster_page_with_pdf_backend_is_the_whole_page():
    document, pages = pages_of(image_bytes(Image.new("RGB", (300, 200), "white"), "PNG"))
    with document:
        page, source = pages[0]
        assert PdfLayout().detect(page, source) == [DetectedRegion((0.0, 0.0, 300.0, 200.0), "text", 1.0, 0)]


def test_synthetic_page_labels_and_order():
    document, pages = pages_of(synthetic_page())
    with document:
        page, source = pages[0]
        regions = PdfLayout().detect(page, source)
        found = {region.label: words_in(page, source, region) for region in regions}
    labels = [region.label for region in regions]
    assert labels == ["header", "doc_title", "paragraph_title", "text", "image", "figure_title", "table", "number",
                      "footer"]
    assert found["header"] == "Quire Journal, volume 1"
    assert found["figure_title"] == "Figure 1: Four bars."
    assert "cell 11" in found["table"]
    assert (found["number"], found["footer"]) == ("7", "Confidential draft")


def test_on_a_single_page_only_the_page_number_is_furniture():
    document, pages = pages_of(synthetic_page(pages=1))
    with document:
        page, source = pages[0]
        regions = {words_in(page, source, region): region.label for region in PdfLayout().detect(page, source)}
    assert regions["7"] == "number"
    assert regions["Quire Journal, volume 1"] == "text"  # nothing shows it runs across pages: it is kept
    assert regions["Confidential draft"] == "footnote"


def test_a_vector_plot_with_axes_is_a_chart_with_its_labels_not_a_table():
    document, pages = pages_of(vector_plot())
    with document:
        page, source = pages[0]
        regions = PdfLayout().detect(page, source)
        chart = words_in(page, source, regions[1])
    assert [region.label for region in regions] == ["text", "chart", "figure_title", "text"]
    for label in ("0.0", "1.0", "10", "Messung A", "Zeit t [s]", "Spannung [V]"):  # ticks, legend, axis titles
        assert label in chart


def test_a_ruled_grid_without_words_in_its_cells_is_no_table():
    pdf = pymupdf.open()
    page = pdf.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(72, 72, 523, 160), "Text above the diagram. " * 20, fontsize=10)
    for i in range(6):
        page.draw_line((100 + 60 * i, 200), (100 + 60 * i, 500))
        page.draw_line((100, 200 + 60 * i), (400, 200 + 60 * i))
    page.insert_text((210, 240), "only one cell has a word", fontsize=8)
    document, pages = pages_of(pdf.tobytes())
    with document:
        labels = [region.label for region in PdfLayout().detect(*pages[0])]
    assert labels == ["text", "image"]


def test_a_chart_is_a_picture_with_its_words_unless_charts_are_recognised():
    silent = Answers()
    result = process_document(vector_plot(), "plot.pdf", silent, PdfLayout(), ProcessOptions(Limits(dpi=DPI)))
    chart = result.pages[0].regions[1]
    assert (chart.label, chart.task, chart.source) == ("chart", None, "text-layer")
    assert "Messung A" in chart.content.text and silent.tasks == []
    charts_on = ProcessOptions(Limits(dpi=DPI), RegionOptions(recognize_charts=True))
    recognizer = Answers({"chart": "Zeit | Messung A"})
    chart = process_document(vector_plot(), "plot.pdf", recognizer, PdfLayout(), charts_on).pages[0].regions[1]
    assert (chart.task, chart.source, chart.content.text) == ("chart", "model", "Zeit | Messung A")


def test_xy_cut_reads_columns_even_when_their_gaps_line_up():
    left = [(0, 0, 40, 10), (0, 12, 40, 30), (0, 32, 40, 50)]
    right = [(60, 0, 100, 10), (60, 12, 100, 30), (60, 32, 100, 50)]  # the same gaps as the left column
    assert xy_cut_order(left + right) == [0, 1, 2, 3, 4, 5]
    assert xy_cut_order(right + left) == [3, 4, 5, 0, 1, 2]


def test_xy_cut_reads_a_full_width_band_in_place():
    boxes = [(0, 0, 100, 10), (0, 20, 40, 40), (60, 20, 100, 40), (0, 50, 100, 60), (0, 70, 40, 90), (60, 70, 100, 90)]
    assert xy_cut_order(boxes) == [0, 1, 2, 3, 4, 5]  # title, two columns, a wide figure, two columns
    shuffled = [boxes[i] for i in (4, 0, 5, 2, 1, 3)]
    assert [shuffled[i] for i in xy_cut_order(shuffled)] == boxes


def test_xy_cut_overlapping_boxes_fall_back_to_top_then_left():
    assert xy_cut_order([(10, 10, 50, 50), (0, 0, 100, 100), (5, 5, 30, 60)]) == [1, 2, 0]


# --- pp-doclayout on tiny checkpoints ----------------------------------------------------------------------------


def test_tiny_layout_checkpoint_is_in_the_hub_format(layout_checkpoint_factory):
    directory = layout_checkpoint_factory()
    assert sorted(path.name for path in directory.iterdir()) == [
        "config.json", "model.safetensors", "preprocessor_config.json"]
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "pp_doclayout_v2"
    assert config["architectures"] == ["PPDocLayoutV2ForObjectDetection"]
    assert [config["id2label"][str(i)] for i in range(25)] == list(HUB_CLASS_NAMES)
    assert len(config["class_thresholds"]) == len(config["class_order"]) == 25
    assert json.loads((directory / "preprocessor_config.json").read_text())["size"] == {"height": 128, "width": 128}


@pytest.mark.parametrize("version", [2, 3])
def test_pp_doclayout_regions_are_well_formed_and_in_model_order(layout_checkpoint_factory, version: int):
    backend = layout_backend("pp-doclayout", str(layout_checkpoint_factory(TinyLayoutSpec(version=version))))
    assert isinstance(backend, PPDocLayout) and backend.name == "pp-doclayout"
    document, pages = pages_of(corpus_bytes("pdflatex-image.pdf"), dpi=72)
    with document:
        page, source = pages[0]
        regions = backend.detect(page, source)
    assert len(regions) >= 2
    assert_well_formed(regions, page)
    for region in regions:
        assert region.score >= backend.thresholds[backend.labels.index(region.label)]
    assert len(filter_overlaps([Detection(r.bbox, r.label, r.score, r.order) for r in regions])) == len(regions)


def test_pp_doclayout_is_deterministic(layout_checkpoint_factory):
    backend = PPDocLayout(layout_checkpoint_factory())
    document, pages = pages_of(corpus_bytes("minimal-document.pdf"), dpi=72)
    with document:
        assert backend.detect(*pages[0]) == backend.detect(*pages[0])


def assert_same_regions(found: list[list[DetectedRegion]], expected: list[list[DetectedRegion]]) -> None:
    """Page for page the same regions: labels and reading order exactly, boxes and scores up to float rounding
    (convolution kernels are picked by batch size, which moves a box by about 1e-4 pixel)."""
    assert [[(r.label, r.order) for r in page] for page in found] == [[(r.label, r.order) for r in page]
                                                                       for page in expected]
    for page, expected_page in zip(found, expected, strict=True):
        for region, expected_region in zip(page, expected_page, strict=True):
            assert region.bbox == pytest.approx(expected_region.bbox, abs=0.01)
            assert region.score == pytest.approx(expected_region.score, abs=1e-5)


@pytest.mark.parametrize("version", [2, 3])
def test_detect_many_finds_on_each_page_what_detect_finds_on_it_alone(layout_checkpoint_factory, version: int):
    directory = layout_checkpoint_factory(TinyLayoutSpec(version=version))
    backend = PPDocLayout(directory)
    with ExitStack() as documents:
        three = []  # portrait, landscape and a small scan: three sizes, each resized to the model's input
        for name in ("multicolumn.pdf", "habibi-rotated.pdf", "grayscale-image.pdf"):
            document, pages = pages_of(corpus_bytes(name), dpi=72)
            documents.enter_context(document)
            three.append(pages[0])
        alone = [backend.detect(page, source) for page, source in three]
        assert all(alone) and alone[0] != alone[1] != alone[2]
        assert_same_regions(backend.detect_many(three), alone)
        assert_same_regions(detect_many(layout_backend("auto", str(directory)), three), alone)


def test_detect_many_lays_out_page_by_page_on_a_backend_without_a_model(tmp_path: Path):
    document, pages = pages_of(corpus_bytes("multicolumn.pdf"))
    with document:
        expected = [PdfLayout().detect(page, source) for page, source in pages]
        assert detect_many(PdfLayout(), pages) == expected
        assert detect_many(layout_backend("auto", str(tmp_path / "no-model")), pages) == expected


def fake_outputs(scores: list[list[float]], boxes: list[list[float]], order: list[int]) -> SimpleNamespace:
    """Model outputs for len(scores) queries: class probabilities, centre boxes, and order logits that put the
    queries in the sequence `order` (query order[0] first)."""
    count = len(scores)
    place = {query: rank for rank, query in enumerate(order)}
    order_logits = torch.tensor([[10.0 if place[i] < place[j] else -10.0 for j in range(count)] for i in range(count)])
    return SimpleNamespace(
        logits=torch.logit(torch.tensor(scores))[None],
        pred_boxes=torch.tensor(boxes)[None],
        order_logits=order_logits[None],
    )


def test_detections_use_per_class_thresholds_page_pixels_and_reading_ranks(layout_checkpoint_factory):
    backend = PPDocLayout(layout_checkpoint_factory())
    text, table = PADDLE_CLASSES.index("text"), PADDLE_CLASSES.index("table")  # thresholds 0.4 and 0.5
    probabilities = []
    for best, score in [(text, 0.45), (table, 0.45), (table, 0.6), (text, 0.3)]:
        row = [0.01] * 25
        row[best] = score
        probabilities.append(row)
    boxes = [[0.25, 0.25, 0.5, 0.5], [0.5, 0.5, 0.2, 0.2], [0.75, 0.75, 0.6, 0.6], [0.5, 0.1, 0.2, 0.1]]
    found = backend._detections(fake_outputs(probabilities, boxes, order=[2, 3, 0, 1]), width=200, height=100)
    assert [(d.label, round(d.score, 3), d.rank) for d in found] == [("text", 0.45, 2), ("table", 0.6, 0)]
    assert found[0].bbox == pytest.approx((0, 0, 100, 50))
    assert found[1].bbox == pytest.approx((90, 45, 200, 100))  # cut at the page's edge


def test_reading_ranks_recover_the_order_the_logits_encode():
    order = [3, 0, 4, 1, 2]
    logits = fake_outputs([[0.5] * 25] * 5, [[0.5] * 4] * 5, order).order_logits[0]
    ranks = reading_ranks(logits)
    assert [int(ranks[query]) for query in order] == [0, 1, 2, 3, 4]


def test_larger_box_wins_a_heavy_overlap_of_its_own_label():
    big = Detection((0, 0, 100, 100), "text", 0.5, 0)
    inside = Detection((10, 10, 60, 60), "text", 0.9, 1)  # higher score, still dropped
    half_out = Detection((80, 0, 140, 40), "text", 0.9, 2)  # only 1/3 inside: a neighbour, kept
    other_label = Detection((20, 20, 50, 50), "table", 0.9, 3)  # a table inside text is not a duplicate
    assert filter_overlaps([inside, big, half_out, other_label]) == [big, half_out, other_label]


def test_near_identical_boxes_under_two_labels_keep_the_higher_score():
    footnote = Detection((0, 0, 100, 50), "footnote", 0.82, 0)
    text = Detection((0, 0, 100, 51), "text", 0.51, 1)
    assert filter_overlaps([text, footnote]) == [footnote]


def test_hub_class_names_map_by_index_onto_the_fine_vocabulary():
    assert quire_labels(dict(enumerate(HUB_CLASS_NAMES)), 25) == list(PADDLE_CLASSES)
    assert quire_labels(dict(enumerate(PADDLE_CLASSES)), 25) == list(PADDLE_CLASSES)
    assert set(PADDLE_CLASSES) == LABELS


def test_other_class_names_go_through_aliases_or_become_text():
    assert quire_labels({0: "table", 1: "figure", 2: "formula", 3: "squiggle"}, 4) == [
        "table", "image", "display_formula", "text"]


def test_pixel_values_follow_the_checkpoint_preprocessor(layout_checkpoint_factory):
    backend = PPDocLayout(layout_checkpoint_factory())
    pixels = backend._pixel_values(Image.new("RGB", (300, 500), (255, 51, 0)))
    assert pixels.shape == (1, 3, 128, 128)
    assert pixels[0, :, 64, 64].tolist() == pytest.approx([1.0, 0.2, 0.0])


def test_pp_doclayout_without_weights_says_how_to_get_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(LayoutModelUnavailable, match=re.escape("--layout pdf")):
        layout_backend("pp-doclayout", str(tmp_path / "missing"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(LayoutModelUnavailable, match="quire models pull --layout-model PaddlePaddle/PP-DocLayoutV2_"):
        layout_backend("pp-doclayout", "PaddlePaddle/PP-DocLayoutV2_safetensors")


def test_a_directory_that_is_not_a_layout_model_is_refused(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(LayoutModelUnavailable, match="not PP-DocLayoutV2 or PP-DocLayoutV3"):
        layout_backend("pp-doclayout", str(tmp_path))


# --- auto, the registry and the setting --------------------------------------------------------------------------


def test_auto_uses_the_model_when_its_weights_are_local(layout_checkpoint_factory):
    auto = layout_backend("auto", str(layout_checkpoint_factory()))
    document, pages = pages_of(corpus_bytes("minimal-document.pdf"), dpi=72)
    with document:
        page, source = pages[0]
        assert isinstance(auto.backend_for(source), PPDocLayout)
        assert auto.detect(page, source) == auto.model.detect(page, source)


def test_auto_without_weights_picks_pdf_for_pdf_pages_and_page_for_images(tmp_path: Path):
    auto = layout_backend("auto", str(tmp_path / "no-model"))
    assert isinstance(auto, AutoLayout) and auto.model is None
    text_doc, text_pages = pages_of(corpus_bytes("multicolumn.pdf"))
    scan_doc, scan_pages = pages_of(corpus_bytes("grayscale-image.pdf"))
    png_doc, png_pages = pages_of(image_bytes(Image.new("RGB", (120, 80), "white"), "PNG"))
    with text_doc, scan_doc, png_doc:
        text_page, scan_page, png_page = text_pages[0], scan_pages[0], png_pages[0]
        assert isinstance(auto.backend_for(text_page[1]), PdfLayout)
        assert auto.detect(*text_page) == PdfLayout().detect(*text_page)
        assert auto.detect(*scan_page) == PageLayout().detect(*scan_page)  # no text layer: the whole page
        assert isinstance(auto.backend_for(png_page[1]), PageLayout)
        assert auto.detect(*png_page) == PageLayout().detect(*png_page)


def test_auto_finds_weights_in_the_hugging_face_cache_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout_checkpoint_factory
):
    snapshot = tmp_path / "models--PaddlePaddle--PP-DocLayoutV2_safetensors" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    for file in layout_checkpoint_factory().iterdir():
        (snapshot / file.name).write_bytes(file.read_bytes())
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert local_layout_weights("PaddlePaddle/PP-DocLayoutV2_safetensors") == snapshot.resolve()
    assert local_layout_weights("PaddlePaddle/PP-DocLayoutV3_safetensors") is None
    assert isinstance(layout_backend("auto", "PaddlePaddle/PP-DocLayoutV2_safetensors").model, PPDocLayout)


def test_backends_by_name():
    assert isinstance(layout_backend("page"), PageLayout)
    assert isinstance(layout_backend("pdf"), PdfLayout)
    assert {layout_backend(name).name for name in ("page", "pdf")} == {"page", "pdf"}
    with pytest.raises(ValueError, match="unknown layout backend 'docling'"):
        layout_backend("docling")


def test_layout_model_setting(monkeypatch: pytest.MonkeyPatch):
    assert Settings().layout_model == "PaddlePaddle/PP-DocLayoutV2_safetensors"
    monkeypatch.setenv("QUIRE_LAYOUT_MODEL", "/models/PP-DocLayoutV3")
    assert Settings().layout_model == "/models/PP-DocLayoutV3"


def test_page_backend_is_the_whole_page():
    document, pages = pages_of(corpus_bytes("minimal-document.pdf"), dpi=72)
    with document:
        page, source = pages[0]
        assert layout_backend("page").detect(page, source) == [
            DetectedRegion((0.0, 0.0, float(page.width_px), float(page.height_px)), "text", 1.0, 0)]
