"""transformers' PaddleOCR-VL, loaded as its users load it: the reference the parity tests and the benchmarks compare
the engine with (Quire itself never loads it).

transformers' PaddleOCR-VL text config reads `mrope_section` from its rope parameters but leaves it off the keys its
rope check knows, so every config it builds for the model logs "Unrecognized keys in `rope_parameters` …
{'mrope_section'}" — the model's, and the one AutoProcessor builds to find the tokenizer. The key is declared where
transformers looks for such keys (as its own Qwen2-VL config does), so the check still speaks for any other key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def _declare_mrope_section() -> None:
    from transformers.models.paddleocr_vl.configuration_paddleocr_vl import PaddleOCRTextConfig

    PaddleOCRTextConfig.ignore_keys_at_rope_validation = frozenset({"mrope_section"})


def load_processor(directory: Path) -> Any:
    """AutoProcessor's PaddleOCRVLProcessor of the checkpoint: tokenizer, image processor and chat template."""
    from transformers import AutoProcessor

    _declare_mrope_section()
    return AutoProcessor.from_pretrained(str(directory))


def load_model(directory: Path, dtype: torch.dtype) -> Any:
    """transformers' PaddleOCRVLForConditionalGeneration of the checkpoint, in eval mode."""
    from transformers import PaddleOCRVLForConditionalGeneration

    _declare_mrope_section()
    return PaddleOCRVLForConditionalGeneration.from_pretrained(str(directory), dtype=dtype).eval()
