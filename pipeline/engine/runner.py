"""Builds one step's flat batch, runs the model over the paged cache, and returns the rows to sample.

Each scheduled sequence contributes the tokens [num_computed, num_computed + count) with their slice of
the request's M-RoPE positions; an image's embedding rows are attached only for the placeholder tokens
inside that window (a window may start or end inside an image span: only the overlapping rows are used).
Images are encoded once per request, all misses of a step in one packed tower call.
"""

from __future__ import annotations

import math

import torch

from .attention import Chunk, PagedAttention, PagedKVCache
from .cpu_kernels import paged_decode_module
from .encoder_cache import EncoderCache
from .model.paddleocr_vl import PaddleOCRVL
from .scheduler import Step
from .sequence import Sequence


class ModelRunner:
    def __init__(self, model: PaddleOCRVL, cache: PagedKVCache, encoder_cache: EncoderCache | None = None) -> None:
        self.model = model
        self.cache = cache
        self.encoder_cache = encoder_cache
        self.block_size = cache.block_size
        self.decode_kernel = paged_decode_module() if cache.k.device.type == "cpu" else None
        self.tower_calls = 0
        self.tower_images = 0

    @torch.inference_mode()
    def run(self, step: Step) -> tuple[list[Sequence], torch.Tensor]:
        """Forward the step; return the sequences whose window reached their end, with their next-token logits."""
        self._encode_missing_images(step)
        device = self.model.device
        ids, positions, slots, image_rows = [], [], [], []
        chunks, sample_rows, sampled = [], [], []
        offset = 0
        for seq, count in step.items:
            start, end = seq.num_computed, seq.num_computed + count
            ids.extend(seq.token_ids[start:end])
            positions.append(seq.positions(start, end))
            slots.extend(self._slots(seq.block_table, start, end))
            image_rows.extend(self._image_rows(seq, start, end))
            chunks.append(Chunk(offset, count, end, seq.block_table[:math.ceil(end / self.block_size)], device))
            offset += count
            if end == seq.num_tokens:
                sample_rows.append(offset - 1)
                sampled.append(seq)
        attention = PagedAttention(self.cache, torch.tensor(slots, device=device), chunks, self.decode_kernel)
        embeds = self.model.embed(torch.tensor(ids, device=device), torch.cat(image_rows) if image_rows else None)
        hidden = self.model(embeds, torch.cat(positions, dim=1).to(device), attention)
        return sampled, self.model.logits(hidden[sample_rows])

    def _slots(self, table: list[int], start: int, end: int) -> list[int]:
        bs = self.block_size
        return [table[i // bs] * bs + i % bs for i in range(start, end)]

    def _image_rows(self, seq: Sequence, start: int, end: int) -> list[torch.Tensor]:
        """Embedding rows of the placeholders in [start, end); an image fully consumed is let go."""
        rows = []
        for span, a, b in seq.spans_in(start, end):
            rows.append(seq.image_embeds[span.index][a - span.start:b - span.start])
            if b == span.end:
                del seq.image_embeds[span.index]
        return rows

    def _encode_missing_images(self, step: Step) -> None:
        """Fill each window's image embeddings from the encoder cache; encode all misses in one tower call."""
        misses: dict[str, tuple[torch.Tensor, tuple[int, int, int]]] = {}
        waiting: list[tuple[Sequence, int, str]] = []
        for seq, count in step.items:
            for span, _, _ in seq.spans_in(seq.num_computed, seq.num_computed + count):
                if span.index in seq.image_embeds:
                    continue
                key = seq.image_hashes[span.index]
                cached = self.encoder_cache.get(key) if self.encoder_cache else None
                if cached is not None:
                    seq.image_embeds[span.index] = cached
                    continue
                misses.setdefault(key, (seq.image_pixels[span.index], seq.prompt.grids[span.index]))
                waiting.append((seq, span.index, key))
        if not misses:
            return
        grids = [grid for _, grid in misses.values()]
        embeds = self.model.encode_images(torch.cat([pixels for pixels, _ in misses.values()]), grids)
        self.tower_calls += 1
        self.tower_images += len(misses)
        merge = self.model.config.vision.spatial_merge_size ** 2
        encoded = dict(zip(misses, embeds.split([t * h * w // merge for t, h, w in grids]), strict=True))
        for key, value in encoded.items():
            if self.encoder_cache:
                self.encoder_cache.put(key, value)
        for seq, index, key in waiting:
            seq.image_embeds[index] = encoded[key]
