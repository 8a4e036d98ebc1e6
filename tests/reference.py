"""The transformers reference, as the parity tests use it (never Quire itself): loaded by
tests/transformers_reference.py, which the benchmarks that compare with it import too."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from pipeline.engine.ops.attention import causal_attention
from tests.transformers_reference import load_model, load_processor


@cache
def hf_processor(directory: Path):
    return load_processor(directory)


@cache
def hf_model(directory: Path, dtype: torch.dtype = torch.float32):
    return load_model(directory, dtype)


def hf_inputs(directory: Path, messages: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    return hf_processor(directory).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")


def user_turn(prompt: str, images: list[Image.Image]) -> list[dict[str, Any]]:
    parts = [{"type": "image", "image": im} for im in images] + [{"type": "text", "text": prompt}]
    return [{"role": "user", "content": parts}]


@torch.inference_mode()
def hf_logits(directory: Path, messages: list[dict[str, Any]]) -> torch.Tensor:
    return hf_model(directory)(**hf_inputs(directory, messages)).logits[0].float()


@torch.inference_mode()
def hf_greedy(directory: Path, messages: list[dict[str, Any]], max_new_tokens: int,
              dtype: torch.dtype = torch.float32) -> tuple[list[int], list[float]]:
    """Greedy tokens of transformers generate (KV cache on, EOS off) and the top-2 margin at each step."""
    inputs = hf_inputs(directory, messages)
    out = hf_model(directory, dtype).generate(
        **inputs, max_new_tokens=max_new_tokens, do_sample=False, use_cache=True, eos_token_id=None,
        output_scores=True, return_dict_in_generate=True)
    tokens = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    margins = [float(s[0].topk(2).values.diff().abs()) for s in out.scores]
    return tokens, margins


def assert_same_greedy(ours: list[int], ref: list[int], margins: list[float], tie: float = 1e-3) -> None:
    """Tokens must match; a divergence is only excused at a near-tie step of the reference."""
    for step, (a, b) in enumerate(zip(ours, ref, strict=True)):
        if a != b:
            assert margins[step] < tie, (
                f"step {step}: ours {a} vs reference {b}, reference top-2 margin {margins[step]:.2e} >= {tie}")
            return


def random_image(width: int, height: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    rs = np.random.RandomState(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": None}[mode]
    shape = (height, width, channels) if channels else (height, width)
    return Image.fromarray((rs.rand(*shape) * 255).astype("uint8"), mode)


class ContiguousKV:
    """KV cache of one sequence in growing tensors: the plain exact path the paged engine is checked against."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        k = self.keys[0]
        return 0 if k is None else k.shape[0]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        past = 0 if self.keys[layer] is None else self.keys[layer].shape[0]
        if past:
            k = torch.cat((self.keys[layer], k))
            v = torch.cat((self.values[layer], v))
        self.keys[layer], self.values[layer] = k, v
        return causal_attention(q, k, v, past)


def assert_engine_equals_transformers(engine, directory: Path,
                                      requests: list[tuple[list[dict[str, Any]], int]]) -> None:
    """The engine's greedy outputs for (messages, max_tokens) pairs, all in flight together, equal transformers'
    one request at a time (up to a near-tie), and no block is left taken afterwards."""
    from pipeline.engine.processor import normalize_messages
    from pipeline.engine.request import Request

    outputs = engine.generate([Request(messages=m, max_tokens=n, ignore_eos=True) for m, n in requests])
    for (messages, max_tokens), out in zip(requests, outputs, strict=True):
        ref, margins = hf_greedy(directory, normalize_messages(messages), max_tokens)
        assert len(out.token_ids) == max_tokens
        assert_same_greedy(out.token_ids, ref, margins)
    assert engine.pool.num_free == engine.pool.num_blocks
