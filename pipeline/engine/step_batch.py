"""One step's flat batch, built once on the host as int32 arrays and sent to the device in one copy.

Every layer of the step reads the same slot mapping, block tables, lengths and positions, so they are built once
per step (never per layer, never per token in Python) and uploaded together: on CUDA through a pinned staging
buffer with one non-blocking copy, so the only sync of a step is reading its sampled ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .scheduler import Step
from .sequence import Sequence

FIELDS = ("ids", "positions", "slots", "query_start", "seq_lens", "block_tables", "sample_rows", "work_seq",
          "work_row")


@dataclass
class StepBatch:
    """Host arrays of a step: rows are the step's tokens, sequence after sequence."""

    ids: np.ndarray  # (T,)
    positions: np.ndarray  # (3, T) M-RoPE positions
    slots: np.ndarray  # (T,) flat KV slot of each new token
    query_start: np.ndarray  # (S+1,) first row of each sequence
    seq_lens: np.ndarray  # (S,) context of each sequence after this step (cached prefix + new tokens)
    block_tables: np.ndarray  # (S, W) block ids, zero-padded
    sample_rows: np.ndarray  # rows whose window reached the sequence's end: their logits are sampled
    work_seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # Triton work list (see
    work_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # triton_attention.work_items)
    tables: list[list[int]] = field(default_factory=list)  # block_tables' rows, unpadded
    sampled: list[Sequence] = field(default_factory=list)
    image_rows: list[torch.Tensor] = field(default_factory=list)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def decode_only(self) -> bool:
        return len(self.ids) == self.num_seqs == len(self.sample_rows)


def build(step: Step, block_size: int, image_rows: list[torch.Tensor]) -> StepBatch:
    """The step's arrays; `image_rows` are the placeholder embeddings of its windows, in row order."""
    ids, positions, slots, lens, tables, sample_rows, sampled = [], [], [], [], [], [], []
    starts = [0]
    for seq, count in step.items:
        start, end = seq.num_computed, seq.num_computed + count
        table = seq.block_table[:math.ceil(end / block_size)]
        ids.extend(seq.token_ids[start:end])
        positions.append(seq.positions(start, end))
        slots.append(_slots(table, start, end, block_size))
        lens.append(end)
        tables.append(table)
        starts.append(starts[-1] + count)
        if end == seq.num_tokens:
            sample_rows.append(starts[-1] - 1)
            sampled.append(seq)
    return StepBatch(np.asarray(ids, np.int32), np.concatenate(positions, axis=1).astype(np.int32),
                     np.concatenate(slots).astype(np.int32), np.asarray(starts, np.int32),
                     np.asarray(lens, np.int32), _padded(tables), np.asarray(sample_rows, np.int32),
                     tables=tables, sampled=sampled, image_rows=image_rows)


def _slots(table: list[int], start: int, end: int, block_size: int) -> np.ndarray:
    if end - start == 1:
        return np.array([table[start // block_size] * block_size + start % block_size])
    index = np.arange(start, end)
    return np.asarray(table)[index // block_size] * block_size + index % block_size


def _padded(tables: list[list[int]]) -> np.ndarray:
    width = max(len(table) for table in tables)
    out = np.zeros((len(tables), width), np.int32)
    for row, table in enumerate(tables):
        out[row, :len(table)] = table
    return out


class Uploader:
    """Sends a StepBatch's arrays to the device as one int32 copy, through a pinned buffer that grows as needed.

    Reusing the buffer is safe because every step ends by reading its sampled ids, which waits for the copy.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.staging = torch.empty(0, dtype=torch.int32)

    def upload(self, batch: StepBatch) -> dict[str, torch.Tensor]:
        arrays = [np.ravel(getattr(batch, name)) for name in FIELDS]
        sizes = [len(a) for a in arrays]
        if self.device.type == "cpu":
            flat = torch.from_numpy(np.concatenate(arrays).astype(np.int32, copy=False))
        else:
            flat = self._staged(arrays, sum(sizes)).to(self.device, non_blocking=True)
        parts = dict(zip(FIELDS, flat.split(sizes), strict=True))
        parts["positions"] = parts["positions"].view(3, -1)
        parts["block_tables"] = parts["block_tables"].view(batch.block_tables.shape)
        return parts

    def _staged(self, arrays: list[np.ndarray], total: int) -> torch.Tensor:
        if self.staging.numel() < total:
            self.staging = torch.empty(max(total, 2 * self.staging.numel()), dtype=torch.int32).pin_memory()
        np.concatenate(arrays, out=self.staging.numpy()[:total], casting="unsafe")
        return self.staging[:total]
