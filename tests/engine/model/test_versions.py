"""Every PaddleOCR-VL version (v1, v1 with its older `{{ image_token }}` template, 1.5, 1.6) loads from its own files
and runs as transformers runs it: the same prompt ids, the same greedy tokens, its own pixel limits."""

from __future__ import annotations

import pytest

from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
from pipeline.samples.tiny_checkpoint import TinySpec
from pipeline.samples.tiny_versions import VERSIONS, version_files
from tests.reference import assert_same_greedy, hf_greedy, hf_inputs, random_image, user_turn

MESSAGES = user_turn("OCR:", [random_image(100, 60, seed=3)])
GREEDY_TOKENS = 8


@pytest.fixture(scope="module", params=VERSIONS)
def versioned(request, checkpoint_factory):
    directory = checkpoint_factory(TinySpec(version=request.param))
    engine = Engine.from_pretrained(directory, dtype="float32")
    yield request.param, directory, engine
    engine.close()


def test_prompt_ids_equal_the_ids_transformers_renders(versioned):
    _, directory, engine = versioned
    ours = engine.processor.encode_messages(MESSAGES).input_ids
    assert ours == hf_inputs(directory, MESSAGES)["input_ids"][0].tolist()


def test_greedy_tokens_match_transformers_generate(versioned):
    _, directory, engine = versioned
    ref, margins = hf_greedy(directory, MESSAGES, GREEDY_TOKENS)
    out = engine.generate([Request(messages=MESSAGES, max_tokens=GREEDY_TOKENS, ignore_eos=True)])[0]
    assert_same_greedy(out.token_ids, ref, margins)


def test_pixel_limits_come_from_the_checkpoints_preprocessor_config(versioned):
    version, _, engine = versioned
    files = version_files(version)
    assert (engine.processor.settings.min_pixels, engine.processor.settings.max_pixels) == (
        files.min_pixels, files.max_pixels)


def test_the_older_template_ends_the_prompt_with_assistant_and_a_space(checkpoint_factory):
    engine = Engine.from_pretrained(checkpoint_factory(TinySpec(version="1.0-remote-code")))
    assert engine.processor.render(MESSAGES).endswith("OCR:\nAssistant: ")
    engine.close()
