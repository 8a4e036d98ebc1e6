"""Quire's PaddleOCR-VL equals transformers' in fp32: logits within 1e-4, greedy tokens identical."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from pipeline.engine.engine import Engine
from pipeline.engine.model.rope import get_rope_index
from pipeline.engine.processor import normalize_messages
from pipeline.engine.prompts import TASK_PROMPTS
from pipeline.engine.request import Request
from tests.reference import ContiguousKV, assert_same_greedy, hf_greedy, hf_logits, random_image, user_turn

GREEDY_TOKENS = 32


def _cases():
    one = [random_image(100, 60, seed=3)]
    two = [random_image(100, 60, seed=4), random_image(280, 90, seed=5)]
    yield "one-image-ocr", user_turn("OCR:", one)
    yield "two-images", user_turn("OCR:", two)
    yield "text-only-plain-string", [{"role": "user", "content": "Describe the page layout."}]
    for task, prompt in TASK_PROMPTS.items():
        if task != "ocr":
            yield f"task-{task}", user_turn(prompt, [random_image(120, 80, seed=6)])


CASES = dict(_cases())


def reference_messages(messages):
    """What transformers is given for the same request: plain strings wrapped as text parts (it renders a bare string
    as an empty turn), and for spotting each crop doubled as the 1.5 model card's pipeline does before its processor
    (these crops stay under both versions' max_pixels, so the larger spotting budget changes nothing here)."""
    messages = normalize_messages(messages)
    if not any(part.get("text") == TASK_PROMPTS["spotting"] for m in messages for part in m["content"]):
        return messages
    return [{**m, "content": [_doubled(part) for part in m["content"]]} for m in messages]


def _doubled(part):
    if part.get("type") != "image":
        return part
    image = part["image"]
    return {**part, "image": image.resize((image.width * 2, image.height * 2), Image.Resampling.LANCZOS)}


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> Engine:
    return Engine.from_pretrained(tiny_checkpoint, dtype="float32")


@torch.inference_mode()
def _our_logits(engine: Engine, messages) -> torch.Tensor:
    prompt = engine.processor.encode_messages(messages)
    model = engine.model
    positions, _ = get_rope_index(prompt.input_ids, prompt.grids, model.config.image_token_id)
    images = model.encode_images(prompt.pixel_values, prompt.grids) if prompt.grids else None
    embeds = model.embed(torch.tensor(prompt.input_ids), images)
    return model.logits(model(embeds, positions, ContiguousKV(model.config.text.num_hidden_layers)))


@pytest.mark.parametrize("case", CASES)
def test_prompt_logits_match_transformers(engine, tiny_checkpoint, case):
    messages = CASES[case]
    ref = hf_logits(tiny_checkpoint, reference_messages(messages))
    ours = _our_logits(engine, messages)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max().item() <= 1e-4


@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_match_transformers_generate(engine, tiny_checkpoint, case):
    messages = CASES[case]
    ref, margins = hf_greedy(tiny_checkpoint, reference_messages(messages), GREEDY_TOKENS)
    out = engine.generate([Request(messages=messages, max_tokens=GREEDY_TOKENS, ignore_eos=True)])[0]
    assert len(out.token_ids) == GREEDY_TOKENS and out.finish_reason == "length"
    assert_same_greedy(out.token_ids, ref, margins)


def test_bf16_greedy_agreement_with_fp32_is_reported(tiny_checkpoint, engine, record_property, capsys):
    bf16 = Engine.from_pretrained(tiny_checkpoint, dtype="bfloat16")
    requests = [Request(messages=messages, max_tokens=GREEDY_TOKENS, ignore_eos=True) for messages in CASES.values()]
    agree = total = 0
    for fp32_out, bf16_out in zip(engine.generate(requests), bf16.generate(requests), strict=True):
        a, b = fp32_out.token_ids, bf16_out.token_ids
        prefix = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        agree, total = agree + prefix, total + len(a)
    rate = agree / total
    record_property("bf16_greedy_prefix_agreement", rate)
    with capsys.disabled():
        print(f"\nbf16 vs fp32 greedy: {agree}/{total} tokens agree before the first divergence ({rate:.1%})")
    fp32_logits = _our_logits(engine, CASES["one-image-ocr"])
    bf16_logits = _our_logits(bf16, CASES["one-image-ocr"])
    assert (bf16_logits - fp32_logits).abs().max() < 0.05 * fp32_logits.abs().max()
