"""Builds one step's flat batch, runs the model over the paged cache, and returns the rows to sample.

Each scheduled sequence contributes the tokens [num_computed, num_computed + count) with their slice of
the request's M-RoPE positions; an image's embedding rows are attached only for the placeholder tokens
inside that window (a window may start or end inside an image span: only the overlapping rows are used).
Images are encoded once per request, all misses of a step in one packed tower call.
"""

from __future__ import annotations

import math

import torch

from .attention import DecodeBatch, PagedAttention, PagedKVCache, PrefillChunk
from .model.paddleocr_vl import PaddleOCRVL
from .scheduler import Step
from .sequence import Sequence


class ModelRunner:
    def __init__(self, model: PaddleOCRVL, cache: PagedKVCache) -> None:
        self.model = model
        self.cache = cache
        self.block_size = cache.block_size
        self.tower_calls = 0

    @torch.inference_mode()
    def run(self, step: Step) -> tuple[list[Sequence], torch.Tensor]:
        """Forward the step; return the sequences whose window reached their end, with their next-token logits."""
        self._encode_missing_images(step)
        device = self.model.device
        ids, positions, slots, image_rows = [], [], [], []
        decode_rows, decode_tables, decode_contexts, prefills, sample_rows, sampled = [], [], [], [], [], []
        offset = 0
        for seq, count in step.items:
            start, end = seq.num_computed, seq.num_computed + count
            ids.extend(seq.token_ids[start:end])
            positions.append(seq.positions(start, end))
            slots.extend(self._slots(seq.block_table, start, end))
            image_rows.extend(seq.image_embeds[s.row + a - s.start:s.row + b - s.start] for s, a, b in
                              seq.spans_in(start, end))
            blocks = seq.block_table[:math.ceil(end / self.block_size)]
            if count == 1:
                decode_rows.append(offset)
                decode_tables.append(blocks)
                decode_contexts.append(end)
            else:
                prefills.append(PrefillChunk(offset, count, end, blocks, device))
            offset += count
            if end == seq.num_tokens:
                sample_rows.append(offset - 1)
                sampled.append(seq)
        decode = DecodeBatch(decode_rows, decode_tables, decode_contexts, self.block_size, device) \
            if decode_rows else None
        attention = PagedAttention(self.cache, torch.tensor(slots, device=device), decode, prefills)
        embeds = self.model.embed(torch.tensor(ids, device=device), torch.cat(image_rows) if image_rows else None)
        hidden = self.model(embeds, torch.cat(positions, dim=1).to(device), attention)
        return sampled, self.model.logits(hidden[sample_rows])

    def _slots(self, table: list[int], start: int, end: int) -> list[int]:
        bs = self.block_size
        return [table[i // bs] * bs + i % bs for i in range(start, end)]

    def _encode_missing_images(self, step: Step) -> None:
        needing = [seq for seq, count in step.items
                   if seq.image_embeds is None and seq.spans_in(seq.num_computed, seq.num_computed + count)]
        if not needing:
            return
        pixels = torch.cat([seq.prompt.pixel_values for seq in needing])
        grids = [grid for seq in needing for grid in seq.prompt.grids]
        embeds = self.model.encode_images(pixels, grids)
        self.tower_calls += 1
        for seq, part in zip(needing, embeds.split([s.num_image_tokens for s in needing]), strict=True):
            seq.image_embeds = part
