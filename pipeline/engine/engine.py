"""The engine: turns requests into recognised text with the PaddleOCR-VL model.

This first engine runs one request at a time on a contiguous KV cache, greedy decoding. It is the exact
reference path; continuous batching over a paged cache builds on the same model interface.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .attention import ContiguousKV
from .model.loader import load_model, resolve_checkpoint
from .model.paddleocr_vl import PaddleOCRVL
from .model.rope import decode_positions, get_rope_index
from .processor import Processor, Prompt
from .request import Output, Request

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Engine:
    def __init__(self, model: PaddleOCRVL, processor: Processor) -> None:
        self.model = model
        self.processor = processor

    @classmethod
    def from_pretrained(cls, path_or_id: str | Path, device: str = "cpu", dtype: str = "float32") -> Engine:
        directory = resolve_checkpoint(path_or_id)
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
        return cls(load_model(directory, device, DTYPES[dtype]), Processor.from_pretrained(directory))

    def generate(self, requests: list[Request]) -> list[Output]:
        return [self._run(request) for request in requests]

    def encode(self, request: Request) -> Prompt:
        if request.messages is not None:
            return self.processor.encode_messages(request.messages)
        return self.processor.encode(request.prompt, request.images)

    @torch.inference_mode()
    def _run(self, request: Request) -> Output:
        start = time.perf_counter()
        prompt = self.encode(request)
        model = self.model
        ids = torch.tensor(prompt.input_ids, device=model.device)
        positions, rope_delta = get_rope_index(prompt.input_ids, prompt.grids, model.config.image_token_id)
        image_embeds = model.encode_images(prompt.pixel_values, prompt.grids) if prompt.grids else None
        kv = ContiguousKV(model.config.text.num_hidden_layers)
        hidden = model(model.embed(ids, image_embeds), positions.to(model.device), kv)
        stops = set(request.stop_token_ids) | (set() if request.ignore_eos else {self.processor.eos_token_id})
        tokens: list[int] = []
        finish, first_token_at = "length", 0.0
        while True:
            token = int(model.logits(hidden[-1]).argmax())
            first_token_at = first_token_at or time.perf_counter()
            if token in stops:
                finish = "stop"
                break
            tokens.append(token)
            if len(tokens) >= request.max_tokens:
                break
            step_ids = torch.tensor([token], device=model.device)
            pos = decode_positions(torch.tensor([kv.length]), torch.tensor([rope_delta])).to(model.device)
            hidden = model(model.embed(step_ids), pos, kv)
        end = time.perf_counter()
        return Output(
            text=self.processor.decode(tokens, request.skips_special_tokens),
            token_ids=tokens,
            finish_reason=finish,
            prompt_tokens=len(prompt.input_ids),
            ttft_s=first_token_at - start,
            tpot_s=(end - first_token_at) / max(1, len(tokens) - 1),
        )
