"""Checks that a PaddleOCR-VL checkpoint will load, without loading it: for a freshly downloaded copy, on any machine.

The model is built on the meta device and only the safetensors headers are read, so checking the 1.9 GB checkpoint
takes seconds and no memory; the names and shapes are compared by the loader's own rules (a hub or transformers-5
layout, stacked projections, unused tensors), so what passes here is what `load_model` accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from .model.checkpoint_config import ModelConfig
from .model.errors import CheckpointError
from .model.loader import check_shape, checked_tensor_names
from .model.paddleocr_vl import PaddleOCRVL
from .processor import Processor

Check = tuple[str, Callable[[Path], str]]


def check_config(directory: Path) -> str:
    config = ModelConfig.from_file(directory / "config.json")
    return f"config.json parses ({config.text.num_hidden_layers} text, {config.vision.num_hidden_layers} vision layers)"


def check_weights(directory: Path) -> str:
    """Every tensor's name and shape against the model Quire builds from the config; CheckpointError if not."""
    with torch.device("meta"):
        model = PaddleOCRVL(ModelConfig.from_file(directory / "config.json"))
    targets, files = checked_tensor_names(model, directory)
    count = 0
    for file in sorted({file for _, file in files.values()}):
        try:
            with safe_open(file, framework="pt") as f:
                for name, (key, in_file) in files.items():
                    if in_file == file:
                        check_shape(key, file, torch.Size(f.get_slice(key).get_shape()), targets[name].shape)
                        count += 1
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{file.name}: unreadable safetensors header ({exc})") from exc
    parameters = sum(p.numel() for p in model.parameters())
    return f"{count} tensors match the model's names and shapes ({parameters / 1e9:.2f}B parameters)"


def check_processor(directory: Path) -> str:
    processor = Processor.from_pretrained(directory)
    prompt = processor.render([{"role": "user", "content": "OCR:"}])
    return f"tokenizer and chat template load ({len(processor.tokenizer)} tokens, a prompt of {len(prompt)} chars)"


CHECKS: list[Check] = [("config", check_config), ("weights", check_weights), ("processor", check_processor)]
