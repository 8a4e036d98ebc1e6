"""On a CPU the vision tower takes a batch's images in groups of bounded patch count, with the same result."""

from __future__ import annotations

import torch

from pipeline.engine.engine import Engine
from pipeline.engine.model import paddleocr_vl
from pipeline.engine.model.paddleocr_vl import patch_groups
from tests.reference import random_image


def test_images_are_grouped_in_order_up_to_the_budget():
    grids = [(1, 10, 10), (1, 20, 40), (1, 4, 4), (1, 8, 8), (1, 30, 30)]  # 100, 800, 16, 64, 900 patches
    assert patch_groups(grids, 1000) == [[(1, 10, 10), (1, 20, 40), (1, 4, 4), (1, 8, 8)], [(1, 30, 30)]]
    assert patch_groups(grids, 900) == [[(1, 10, 10), (1, 20, 40)], [(1, 4, 4), (1, 8, 8)], [(1, 30, 30)]]
    assert patch_groups(grids, 10_000) == [grids]
    assert patch_groups([], 1000) == []


def test_an_image_larger_than_the_budget_goes_alone():
    assert patch_groups([(1, 50, 50), (1, 2, 2)], 100) == [[(1, 50, 50)], [(1, 2, 2)]]


@torch.inference_mode()
def test_grouped_tower_passes_equal_one_pass(tiny_checkpoint, monkeypatch):
    engine = Engine.from_pretrained(tiny_checkpoint)
    images = [random_image(w, h, seed=i) for i, (w, h) in enumerate([(120, 60), (300, 90), (80, 80), (200, 150)])]
    prompt = engine.processor.encode("OCR:", images)
    monkeypatch.setattr(paddleocr_vl, "CPU_TOWER_PATCHES", 10**9)
    whole = engine.model.encode_images(prompt.pixel_values, prompt.grids)
    monkeypatch.setattr(paddleocr_vl, "CPU_TOWER_PATCHES", 64)
    assert len(patch_groups(prompt.grids, 64)) == len(images)
    assert torch.equal(engine.model.encode_images(prompt.pixel_values, prompt.grids), whole)
