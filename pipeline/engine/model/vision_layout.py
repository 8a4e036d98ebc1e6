"""Where every patch of a packed vision batch sits, computed once per tower call on the host.

The tower's position table, its 2-D rotary embedding and the projector's 2×2 merge all depend only on each image's
grid. Building their indices here with numpy and sending them in one copy replaces a handful of small device ops per
image (which, at 64 crops a step, cost more launches than the tower's own layers).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .rope import Grid


class VisionLayout:
    """Per patch: row, column and its image's height and width; the merge order; each frame's length and offset."""

    def __init__(self, grids: Sequence[Grid], merge: int, device: torch.device) -> None:
        coords, order, offset = [], [], 0
        for t, h, w in grids:
            coords.append(_coordinates(t, h, w))
            order.append(_merge_order(t, h, w, merge) + offset)
            offset += t * h * w
        self.lengths = [h * w for t, h, w in grids for _ in range(t)]
        frame_offsets = np.cumsum([0, *self.lengths])
        packed = torch.from_numpy(np.concatenate([np.concatenate(coords, axis=1).ravel(), np.concatenate(order),
                                                  frame_offsets]))
        if device.type != "cpu":
            packed = packed.pin_memory().to(device, non_blocking=True)
        self.rows, self.cols, self.heights, self.widths, self.merge_order, offsets = packed.split(
            [offset] * 5 + [len(frame_offsets)])
        self.frame_offsets = offsets.to(torch.int32)
        self.grids = list(grids)


def _coordinates(t: int, h: int, w: int) -> np.ndarray:
    rows = np.tile(np.repeat(np.arange(h), w), t)
    cols = np.tile(np.arange(w), h * t)
    return np.stack([rows, cols, np.full(t * h * w, h), np.full(t * h * w, w)])


def _merge_order(t: int, h: int, w: int, m: int) -> np.ndarray:
    """Patch indices so that each m×m window's patches are consecutive, windows in raster order per frame."""
    f, i, j, a, b = np.meshgrid(np.arange(t), np.arange(h // m), np.arange(w // m), np.arange(m), np.arange(m),
                                indexing="ij")
    return (f * h * w + (i * m + a) * w + j * m + b).ravel()
