"""The `pp-doclayout` layout backend: PP-DocLayoutV2 / V3 through transformers, with their reading order.

The model classes come from transformers; their image processors do not, because they are built on
torchvision, which Quire does not install. `_pixel_values` and `_detections` redo what those processors do
(bicubic resize without antialiasing, rescale and normalise from the checkpoint's preprocessor_config.json;
sigmoid scores, centre boxes to corners, the vote over the order logits) with plain torch. On top, as PaddleX's
pipeline does: one label per box (its best class) kept when it clears that class's threshold, heavy overlaps
resolved, and labels mapped onto Quire's vocabulary.

`detect_many` lays several pages out in one forward pass: every page is resized to the model's fixed input size,
so they stack without padding, and nothing in the model mixes the pages of a batch, so each page gets the regions
`detect` finds on it alone, up to float rounding (oneDNN and cuDNN pick convolution kernels by batch size, which
moves a box by about 1e-4 pixel). The model runs in fp32 on every device: the reading order comes from votes over
pairwise logits and the kept boxes from per-class thresholds, reduced precision moves values across both, and
without the real weights here nothing shows that bf16 keeps the same regions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.nn import functional
from transformers import AutoConfig, PPDocLayoutV2ForObjectDetection, PPDocLayoutV3ForObjectDetection
from transformers.utils import ModelOutput

from pipeline.documents.layout_contract import LABELS, BBox, DetectedRegion, LaidPage
from pipeline.documents.layout_weights import LayoutModelUnavailable, resolve_layout_weights
from pipeline.documents.render import RenderedPage
from pipeline.documents.source import SourcePage

_MODEL_CLASSES = {
    "pp_doclayout_v2": PPDocLayoutV2ForObjectDetection,
    "pp_doclayout_v3": PPDocLayoutV3ForObjectDetection,
}

# PP-DocLayout's 25 classes by index. Hub configs fold a few together under one name ("formula" for both kinds,
# "header" for header images, ...); the index tells them apart again.
PADDLE_CLASSES = (
    "abstract", "algorithm", "aside_text", "chart", "content", "display_formula", "doc_title", "figure_title",
    "footer", "footer_image", "footnote", "formula_number", "header", "header_image", "image", "inline_formula",
    "number", "paragraph_title", "reference", "reference_content", "seal", "table", "text", "vertical_text",
    "vision_footnote",
)
_FOLDED = {"display_formula": "formula", "inline_formula": "formula", "footer_image": "footer",
           "header_image": "header", "vertical_text": "text"}
_ALIASES = {"formula": "display_formula", "figure": "image", "picture": "image", "title": "paragraph_title",
            "caption": "figure_title", "list": "text", "page_number": "number", "page-header": "header",
            "page-footer": "footer"}
# PaddleOCR-VL's thresholds, for a checkpoint whose config carries none (V3): lower for text-like classes.
_THRESHOLDS = {"display_formula": 0.4, "inline_formula": 0.4, "doc_title": 0.4, "paragraph_title": 0.4,
               "text": 0.4, "vertical_text": 0.4, "seal": 0.45}
_DEFAULT_THRESHOLD = 0.5

SAME_LABEL_OVERLAP = 0.8  # share of the smaller box inside a larger one of its label that makes it a duplicate
CROSS_LABEL_IOU = 0.95  # boxes this alike under two labels are one element: the higher score keeps it


@dataclass(frozen=True)
class Detection:
    """One box the model kept: pixels on the page image, Quire label, score, and the model's reading rank."""

    bbox: BBox
    label: str
    score: float
    rank: int


class PPDocLayout:
    """PP-DocLayoutV2 / V3 on a page image: boxes, labels, scores, and the model's own reading order."""

    name = "pp-doclayout"

    def __init__(self, directory: Path, device: str = "cpu") -> None:
        config = AutoConfig.from_pretrained(directory)
        model_class = _MODEL_CLASSES.get(config.model_type)
        if model_class is None:
            raise LayoutModelUnavailable(
                f"{directory}: model_type {config.model_type!r} is not PP-DocLayoutV2 or PP-DocLayoutV3")
        self.device = torch.device(device)
        self.model = model_class.from_pretrained(directory, config=config).to(self.device).eval()
        self.labels = quire_labels(config.id2label, config.num_labels)
        thresholds = getattr(config, "class_thresholds", None)
        if not thresholds or len(thresholds) != config.num_labels:
            thresholds = [_THRESHOLDS.get(label, _DEFAULT_THRESHOLD) for label in self.labels]
        self.thresholds = torch.tensor(thresholds, dtype=torch.float32)
        self.preprocessor = _preprocessor(directory)

    @classmethod
    def load(cls, model: str, device: str = "cpu") -> PPDocLayout:
        """From a local directory or a hub id (downloaded unless offline); LayoutModelUnavailable if neither."""
        return cls(resolve_layout_weights(model), device)

    def detect(self, page: RenderedPage, source: SourcePage) -> list[DetectedRegion]:
        return self.detect_many([(page, source)])[0]

    def detect_many(self, pages: Sequence[LaidPage]) -> list[list[DetectedRegion]]:
        """Each page's regions from one forward pass over all of them."""
        if not pages:
            return []
        pixels = torch.cat([self._pixel_values(page.image) for page, _ in pages])
        with torch.inference_mode():
            outputs = self.model(pixel_values=pixels)
        return [self._regions(outputs, index, page) for index, (page, _) in enumerate(pages)]

    def _regions(self, outputs: ModelOutput, index: int, page: RenderedPage) -> list[DetectedRegion]:
        """The regions of the batch's page `index`, overlaps resolved, in the model's reading order."""
        detections = self._detections(outputs, page.width_px, page.height_px, index)
        kept = sorted(filter_overlaps(detections), key=lambda d: d.rank)
        return [DetectedRegion(d.bbox, d.label, d.score, order) for order, d in enumerate(kept)]

    def _pixel_values(self, image: Image.Image) -> torch.Tensor:
        """The image as the model's input: what the PP-DocLayout image processors compute, without torchvision. The
        page's bytes go to the model's device first and are resized there: on a GPU the host does no per-page
        arithmetic (it shares its cores with the engine's loop)."""
        config = self.preprocessor
        pixels = torch.from_numpy(np.array(image.convert("RGB"))).to(self.device).permute(2, 0, 1)[None].float()
        if config.get("do_resize", True):
            size = config.get("size", {"height": 800, "width": 800})
            pixels = functional.interpolate(pixels, size=(size["height"], size["width"]), mode="bicubic",
                                            align_corners=False, antialias=False)
            pixels = pixels.clamp(0, 255).round()  # torchvision returns uint8 pixels from a uint8 image
        if config.get("do_rescale", True):
            pixels = pixels * config.get("rescale_factor", 1 / 255)
        if config.get("do_normalize", True):
            mean = torch.tensor(config.get("image_mean", [0.0, 0.0, 0.0]), device=self.device)[:, None, None]
            std = torch.tensor(config.get("image_std", [1.0, 1.0, 1.0]), device=self.device)[:, None, None]
            pixels = (pixels - mean) / std
        return pixels

    def _detections(self, outputs: ModelOutput, width: int, height: int, index: int = 0) -> list[Detection]:
        """Boxes of the batch's page `index` whose best class clears its threshold, in pixels of a width×height page,
        with reading ranks."""
        scores, classes = outputs.logits[index].float().sigmoid().max(dim=-1)
        scores, classes = scores.cpu(), classes.cpu()
        ranks = reading_ranks(outputs.order_logits[index].float()).cpu()
        centers, sizes = outputs.pred_boxes[index].float().split(2, dim=-1)
        corners = torch.cat([centers - sizes / 2, centers + sizes / 2], dim=-1).clamp(0.0, 1.0).cpu()
        boxes = corners * torch.tensor([width, height, width, height], dtype=corners.dtype)
        keep = scores >= self.thresholds[classes]
        found = []
        for index in keep.nonzero().flatten().tolist():
            x0, y0, x1, y1 = boxes[index].tolist()
            if x1 - x0 >= 1 and y1 - y0 >= 1:
                label = self.labels[int(classes[index])]
                found.append(Detection((x0, y0, x1, y1), label, float(scores[index]), int(ranks[index])))
        return found


def quire_labels(id2label: dict[int, str], num_labels: int) -> list[str]:
    """Quire's label for each class index of a checkpoint.

    A 25-class checkpoint whose names are PP-DocLayout's (fine or folded) is read by index; other names go
    through a few aliases, and a name Quire does not know becomes `text`, so it is still recognised.
    """
    names = [id2label[index] for index in range(num_labels)]
    if num_labels == len(PADDLE_CLASSES) and all(
        name in (fine, _FOLDED.get(fine)) for name, fine in zip(names, PADDLE_CLASSES, strict=True)
    ):
        return list(PADDLE_CLASSES)
    return [name if name in LABELS else _ALIASES.get(name, "text") for name in names]


def reading_ranks(order_logits: torch.Tensor) -> torch.Tensor:
    """Each query's place in reading order from the (queries × queries) pairwise order logits.

    Logit [i, j] (i < j) says "i comes before j"; a query's votes count how many others it follows, and the
    ranks sort the queries by those votes, as the PP-DocLayout image processors do.
    """
    scores = order_logits.sigmoid()
    votes = scores.triu(diagonal=1).sum(dim=0) + (1.0 - scores.T).tril(diagonal=-1).sum(dim=0)
    ranks = torch.empty_like(votes, dtype=torch.long)
    ranks[votes.argsort()] = torch.arange(votes.numel())
    return ranks


def filter_overlaps(detections: list[Detection]) -> list[Detection]:
    """Drop duplicates: near-identical boxes under two labels keep the higher score; then a box mostly inside a
    larger box of its own label goes, whatever its score (the larger box wins a heavy overlap)."""
    kept: list[Detection] = []
    for detection in sorted(detections, key=lambda d: -d.score):
        if all(other.label == detection.label or _iou(other.bbox, detection.bbox) < CROSS_LABEL_IOU for other in kept):
            kept.append(detection)
    survivors: list[Detection] = []
    for detection in sorted(kept, key=lambda d: -_area(d.bbox)):
        area = _area(detection.bbox)
        if all(
            other.label != detection.label or _intersection(other.bbox, detection.bbox) < SAME_LABEL_OVERLAP * area
            for other in survivors
        ):
            survivors.append(detection)
    return survivors


def _preprocessor(directory: Path) -> dict:
    path = directory / "preprocessor_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _area(box: BBox) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _intersection(a: BBox, b: BBox) -> float:
    return _area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def _iou(a: BBox, b: BBox) -> float:
    inter = _intersection(a, b)
    union = _area(a) + _area(b) - inter
    return inter / union if union > 0 else 0.0
