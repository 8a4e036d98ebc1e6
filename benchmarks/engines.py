"""Engines the benchmarks build beside the one they measure: a model at the real shape with random weights made on
the device, and an engine released between sections so the next one gets the device memory.

Its own module so benchmarks.gpu and benchmarks.pages can both use it without importing each other.
"""

from __future__ import annotations

import gc

import torch

from pipeline.engine.engine import Engine
from pipeline.engine.model.checkpoint_config import ModelConfig
from pipeline.engine.model.paddleocr_vl import PaddleOCRVL


def release(engine: Engine) -> None:
    """Stop the engine's loop and hand its device memory back, so later sections get it."""
    engine.close()
    del engine
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def random_model(config: ModelConfig, device: torch.device, dtype: torch.dtype) -> PaddleOCRVL:
    """The model at `config`'s shape with random weights made on the device (a 1.9 GB file cannot travel there)."""
    with torch.device("meta"):
        model = PaddleOCRVL(config)
    model = model.to_empty(device=device)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.02)
            else:
                parameter.fill_(1.0 if "norm" in name else 0.0)
    return model.to(dtype).eval()
