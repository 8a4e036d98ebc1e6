"""The transformers reference loads without transformers' warning about the rope keys, and still with the model's
M-RoPE sections: the parity tests and the benchmarks compare against the real thing, quietly."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from pipeline.samples.tiny_checkpoint import TinySpec
from tests.transformers_reference import load_model, load_processor


@pytest.fixture
def transformers_warnings() -> Iterator[list[str]]:
    """What transformers logs while the test runs (its loggers do not propagate to pytest's capture)."""
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    yield seen
    logger.removeHandler(handler)


@pytest.mark.parametrize("version", ["1.0", "1.5"])  # the hub's flat config and transformers 5's nested one
def test_the_reference_loads_with_its_mrope_sections_and_no_unrecognized_rope_keys(checkpoint_factory, version,
                                                                                   transformers_warnings):
    directory: Path = checkpoint_factory(TinySpec(version=version))
    model = load_model(directory, torch.float32)
    processor = load_processor(directory)
    assert model.config.text_config.rope_parameters["mrope_section"] == [2, 3, 3]
    assert processor.tokenizer is not None and not model.training
    assert not [message for message in transformers_warnings if "Unrecognized keys" in message]
