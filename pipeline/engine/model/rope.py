"""Rotary position embeddings: the decoder's 3-D M-RoPE and the vision tower's 2-D axial RoPE.

Positions are computed once per request from the whole prompt (`get_rope_index`); a paged engine slices
them per prefill chunk and derives decode positions from `rope_delta`, so nothing here depends on how a
prompt is split.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Grid = tuple[int, int, int]


def get_rope_index(
    input_ids: Sequence[int], grids: Sequence[Grid], image_token_id: int, merge_size: int = 2
) -> tuple[torch.Tensor, int]:
    """Return the (3, L) M-RoPE positions of a prompt and its rope_delta.

    A text token advances all three axes by one; an image's merged tokens take (t, row, col) offsets from
    the running start, after which text resumes at the image's largest extent. The k-th generated token
    then sits at `L + k + rope_delta` on every axis.
    """
    ids = torch.as_tensor(list(input_ids), dtype=torch.long)
    is_image = ids == image_token_id
    chunks: list[torch.Tensor] = []
    cursor, index, grid_iter = 0, 0, iter(grids)
    while index < len(ids):
        run_end = _run_end(is_image, index)
        if bool(is_image[index]):
            t, h, w = next(grid_iter)
            gh, gw = h // merge_size, w // merge_size
            if (run_end - index) != t * gh * gw:
                raise ValueError(f"image span of {run_end - index} tokens does not match grid {(t, h, w)}")
            tt, hh, ww = torch.meshgrid(torch.arange(t), torch.arange(gh), torch.arange(gw), indexing="ij")
            chunks.append(torch.stack([tt.flatten(), hh.flatten(), ww.flatten()]) + cursor)
            cursor += max(t, gh, gw)
        else:
            chunks.append(torch.arange(cursor, cursor + run_end - index).expand(3, -1))
            cursor += run_end - index
        index = run_end
    if next(grid_iter, None) is not None:
        raise ValueError("more image grids than image spans in the prompt")
    if not chunks:
        return torch.zeros(3, 0, dtype=torch.long), 0
    positions = torch.cat(chunks, dim=1)
    return positions, int(positions.max()) + 1 - len(ids)


def _run_end(is_image: torch.Tensor, start: int) -> int:
    differs = (is_image[start:] != is_image[start]).nonzero()
    return start + int(differs[0]) if len(differs) else len(is_image)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class MRope:
    """3-D multimodal rotary embedding of the decoder (NeoX rotate-half, frequency sections t/h/w)."""

    def __init__(self, head_dim: int, theta: float, sections: Sequence[int]) -> None:
        arange = torch.arange(0, head_dim, 2, dtype=torch.float, device="cpu")
        self.tables = _PerDevice(inv_freq=1.0 / (theta ** (arange / head_dim)), axis=torch.cat(
            [torch.full((n,), i % 3, dtype=torch.long, device="cpu") for i, n in enumerate(sections)]))

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin (T, head_dim) for positions (3, T), cast to the activation dtype like the reference."""
        inv_freq, axis = self.tables.on(positions.device)
        freqs = positions[..., None].float() * inv_freq  # (3, T, D/2)
        picked = freqs.gather(0, axis.view(1, 1, -1).expand(1, freqs.shape[1], -1))[0]
        emb = torch.cat((picked, picked), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (T, heads, D) with cos/sin (T, D)."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    return x * cos + rotate_half(x) * sin


class VisionRope:
    """Axial 2-D rotary embedding of the vision tower: row frequencies, then column frequencies."""

    def __init__(self, head_dim: int, theta: float) -> None:
        spatial = head_dim // 2
        arange = torch.arange(0, spatial, 2, dtype=torch.float, device="cpu")
        self.tables = _PerDevice(inv_freq=1.0 / (theta ** (arange / spatial)))

    def cos_sin(self, rows: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (inv_freq,) = self.tables.on(rows.device)
        f = torch.cat((rows[:, None].float() * inv_freq, cols[:, None].float() * inv_freq), dim=-1)
        emb = torch.cat((f, f), dim=-1)
        return emb.cos(), emb.sin()


class _PerDevice:
    """Constant tables copied to each device once: a copy per call would be a host-to-device copy in every layer's
    step (and is not allowed inside CUDA-graph capture)."""

    def __init__(self, **tables: torch.Tensor) -> None:
        self.copies = {torch.device("cpu"): tuple(tables.values())}

    def on(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        if device not in self.copies:
            self.copies[device] = tuple(t.to(device) for t in self.copies[torch.device("cpu")])
        return self.copies[device]
