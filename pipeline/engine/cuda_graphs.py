"""Decode-only steps replayed from CUDA graphs, one graph per batch-size bucket, captured when the engine starts.

A decode step of a 0.3B decoder is hundreds of small kernels; launched one by one from Python they take longer than
they run. A graph replays them in one launch. Graphs read fixed addresses, so every input of a step is copied into
static buffers, and the bucket's spare rows are padding: they write and read only the cache's scratch block, so
they never touch a sequence's KV. Without `capture` (a CPU) the same padded path runs eagerly: that is how the
padding is tested without a GPU.
"""

from __future__ import annotations

import logging
import math

import torch

from .kv_cache import PagedKVCache
from .model.paddleocr_vl import PaddleOCRVL
from .ops.attention import FusedPagedAttention
from .step_batch import StepBatch

log = logging.getLogger(__name__)
MAX_CONTEXT = 16384  # tokens: a decode step with a longer sequence runs eagerly (the block-table width is fixed)


def buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 up to max_num_seqs (and max_num_seqs itself)."""
    sizes = [b for b in (1, 2, 4, 8) if b < max_num_seqs] + list(range(16, max_num_seqs, 16))
    return [*sizes, max_num_seqs]


class DecodeGraphs:
    def __init__(self, model: PaddleOCRVL, cache: PagedKVCache, max_num_seqs: int) -> None:
        self.model, self.cache = model, cache
        self.buckets = buckets(max_num_seqs)
        rows, width, device = self.buckets[-1], math.ceil(MAX_CONTEXT / cache.block_size), model.device
        zeros = {"dtype": torch.int32, "device": device}
        self.static = {"ids": torch.zeros(rows, **zeros), "positions": torch.zeros(3, rows, **zeros),
                       "slots": torch.zeros(rows, **zeros), "query_start": torch.arange(rows + 1, **zeros),
                       "seq_lens": torch.ones(rows, **zeros), "block_tables": torch.zeros(rows, width, **zeros),
                       "work_seq": torch.arange(rows, **zeros), "work_row": torch.zeros(rows, **zeros)}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.steps = 0  # decode steps served here (stats: decode_graph_steps)

    def fits(self, batch: StepBatch) -> bool:
        width = self.static["block_tables"].shape[1]
        return (batch.decode_only and not batch.image_rows and batch.num_seqs <= self.buckets[-1]
                and batch.block_tables.shape[1] <= width)

    def run(self, batch: StepBatch, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits of a decode-only step (one row per sequence, in order), valid until the next run."""
        rows = batch.num_seqs
        size = next(b for b in self.buckets if b >= rows)
        self.steps += 1
        static = self.static
        for name in ("ids", "slots", "seq_lens"):
            static[name][:rows].copy_(tensors[name])
        static["positions"][:, :rows].copy_(tensors["positions"])
        static["block_tables"][:rows, :batch.block_tables.shape[1]].copy_(tensors["block_tables"])
        self._pad(rows, size)
        if size in self.graphs:
            self.graphs[size].replay()
            return self.outputs[size][:rows]
        return self._forward(size)[:rows]

    @torch.inference_mode()
    def capture(self) -> bool:
        """Capture every bucket, largest first (the smaller ones reuse its memory pool), each checked against an
        eager run of the same padded batch; on any failure or difference, no graph is used and decode runs eagerly."""
        try:
            pool = None
            for size in reversed(self.buckets):
                pool = self._capture(size, pool)
        except Exception as exc:  # a capture that fails costs speed, never a request
            log.warning("CUDA graphs are off, decode steps run eagerly: %s", exc)
            self.graphs.clear()
            self.outputs.clear()
            return False
        return True

    def _capture(self, size: int, pool: object) -> object:
        self._pad(0, size)
        eager = self._forward(size).clone()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            output = self._forward(size)
        graph.replay()
        torch.cuda.synchronize()
        if not torch.allclose(output, eager, rtol=1e-3, atol=1e-3):
            raise RuntimeError(f"graph output differs from eager at batch {size}: "
                               f"{(output - eager).abs().max().item():.3g}")
        self.graphs[size], self.outputs[size] = graph, output
        return graph.pool()

    def _pad(self, rows: int, size: int) -> None:
        """Rows [rows, size) become padding: token 0 at position 0, one key, all on the scratch block."""
        static, scratch = self.static, self.cache.scratch_block
        static["ids"][rows:size] = 0
        static["positions"][:, rows:size] = 0
        static["slots"][rows:size] = scratch * self.cache.block_size
        static["seq_lens"][rows:size] = 1
        static["block_tables"][rows:size, 0] = scratch

    def _forward(self, size: int) -> torch.Tensor:
        views = {name: tensor[:size] for name, tensor in self.static.items()}
        views["query_start"] = self.static["query_start"][:size + 1]
        attention = FusedPagedAttention(self.cache, views)
        embeds = self.model.embed(views["ids"])
        return self.model.logits(self.model(embeds, self.static["positions"][:, :size], attention))
