"""Builds one step's flat batch, runs the model over the paged cache, and returns the rows to sample.

Each scheduled sequence contributes the tokens [num_computed, num_computed + count) with their slice of
the request's M-RoPE positions; an image's embedding rows are attached only for the placeholder tokens
inside that window (a window may start or end inside an image span: only the overlapping rows are used).
Images are encoded once per request, all misses of a step in one packed tower call.

Two attention backends: `torch` (the CPU's: the compiled decode kernel, SDPA per prefill chunk) and `triton`
(CUDA's: one fused call per layer; on a CPU it runs under Triton's interpreter, which is how it is tested).
On CUDA, decode-only steps replay CUDA graphs (cuda_graphs.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from . import step_batch
from .cuda_graphs import DecodeGraphs
from .encoder_cache import EncoderCache
from .images import ImageSettings
from .kv_cache import PagedKVCache
from .model.paddleocr_vl import PaddleOCRVL, VisionAttend
from .model.vision_layout import VisionLayout
from .ops.attention import Chunk, FusedPagedAttention, PagedAttention
from .ops.extension import extension_module
from .ops.vision_attention import KernelVisionAttention, SplitAttention, VarlenAttention, vision_kernel_usable
from .processor import normalization, normalize
from .scheduler import Step
from .sequence import Sequence
from .step_batch import StepBatch, Uploader

BACKENDS = ("auto", "torch", "triton")


def resolve_backend(name: str, device: torch.device) -> str:
    if name not in BACKENDS:
        raise ValueError(f"attention must be one of {BACKENDS}, not {name!r}")
    if name == "auto":
        return "triton" if device.type == "cuda" else "torch"
    return name


class ModelRunner:
    def __init__(self, model: PaddleOCRVL, cache: PagedKVCache, encoder_cache: EncoderCache | None = None,
                 backend: str = "auto", max_num_seqs: int = 32, cuda_graphs: bool = False,
                 table: torch.Tensor | None = None) -> None:
        """`table`: the processor's normalisation table (processor.normalization), which turns the sequences' uint8
        patches into the tower's input; None: the checkpoint's default preprocessing."""
        self.model = model
        self.table = (table if table is not None else normalization(ImageSettings())).to(model.device)
        self.cache = cache
        self.encoder_cache = encoder_cache
        self.block_size = cache.block_size
        self.backend = resolve_backend(backend, model.device)
        self.decode_kernel = extension_module() if self.backend == "torch" and model.device.type == "cpu" else None
        self.uploader = Uploader(model.device)
        self.block_q = self._query_block() if self.backend == "triton" else 0
        self.graphs = self._decode_graphs(max_num_seqs) if cuda_graphs else None
        self.vision_attention = self._vision_attention()
        self.tower_calls = 0
        self.tower_images = 0

    def _vision_attention(self) -> Callable[[VisionLayout], VisionAttend]:
        """The tower's attention: the varlen Triton kernel on the fused backend, the compiled bf16 kernel on a CPU
        that has it, else SDPA per frame."""
        if self.backend == "triton":
            return VarlenAttention
        if vision_kernel_usable(self.model.dtype, self.model.device):
            return KernelVisionAttention
        return SplitAttention

    @torch.inference_mode()
    def prepare(self, step: Step) -> tuple[StepBatch, dict[str, torch.Tensor]]:
        """The host half of a step: images encoded (or found cached), the batch's arrays built and sent."""
        self._encode_missing_images(step)
        batch = step_batch.build(step, self.block_size, self._window_images(step))
        if self.block_q:
            from .ops.triton_attention import work_items

            batch.work_seq, batch.work_row = work_items(np.diff(batch.query_start), self.block_q)
        return batch, self.uploader.upload(batch)

    @torch.inference_mode()
    def forward(self, batch: StepBatch, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits of the batch's sampled rows: a decode-only step replays a CUDA graph when one fits."""
        if self.graphs is not None and self.graphs.fits(batch):
            return self.graphs.run(batch, tensors)
        embeds = self.model.embed(tensors["ids"], torch.cat(batch.image_rows) if batch.image_rows else None)
        hidden = self.model(embeds, tensors["positions"], self.attention(batch, tensors))
        return self.model.logits(hidden[tensors["sample_rows"].long()])

    def attention(self, batch: StepBatch, tensors: dict[str, torch.Tensor]) -> PagedAttention | FusedPagedAttention:
        if self.backend == "triton":
            return FusedPagedAttention(self.cache, tensors)
        starts, lens, device = batch.query_start.tolist(), batch.seq_lens.tolist(), self.model.device
        chunks = [Chunk(starts[i], starts[i + 1] - starts[i], lens[i], table, device)
                  for i, table in enumerate(batch.tables)]
        return PagedAttention(self.cache, tensors["slots"].long(), chunks, self.decode_kernel)

    def _query_block(self) -> int:
        """Query rows per Triton program, fixed by the model's head counts (ops/triton_attention.py's query_block)."""
        from .ops.triton_attention import query_block

        text = self.model.config.text
        return query_block(text.num_attention_heads, text.num_key_value_heads)

    def _decode_graphs(self, max_num_seqs: int) -> DecodeGraphs | None:
        """Graphs of the decode step when this is CUDA with the fused backend and capture works."""
        if self.backend != "triton" or self.model.device.type != "cuda":
            return None
        graphs = DecodeGraphs(self.model, self.cache, max_num_seqs)
        return graphs if graphs.capture() else None

    def _normalized(self, patches: torch.Tensor) -> torch.Tensor:
        """uint8 patches → the tower's input on the model's device: bytes cross to a GPU (a quarter of float32's
        traffic), pinned and without blocking the host, and the lookup runs there."""
        if self.model.device.type != "cpu":
            patches = patches.pin_memory().to(self.model.device, non_blocking=True)
        return normalize(patches, self.table)

    def _window_images(self, step: Step) -> list[torch.Tensor]:
        """Embedding rows of the placeholders in each window, in row order; an image fully consumed is let go."""
        rows = []
        for seq, count in step.items:
            start, end = seq.num_computed, seq.num_computed + count
            if start >= seq.num_prompt_tokens:
                continue
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
            if seq.num_computed >= seq.num_prompt_tokens:
                continue
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
        pixels = self._normalized(torch.cat([pixels for pixels, _ in misses.values()]))
        embeds = self.model.encode_images(pixels, grids, self.vision_attention)
        self.tower_calls += 1
        self.tower_images += len(misses)
        merge = self.model.config.vision.spatial_merge_size ** 2
        encoded = dict(zip(misses, embeds.split([t * h * w // merge for t, h, w in grids]), strict=True))
        for key, value in encoded.items():
            if self.encoder_cache:
                self.encoder_cache.put(key, value)
        for seq, index, key in waiting:
            seq.image_embeds[index] = encoded[key]
