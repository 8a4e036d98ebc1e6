"""oneDNN-prepacked linears for a CPU model: each weight reordered once for oneDNN's GEMM instead of on every call."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .extension import enabled

Linears = tuple[type[nn.Module], ...]


def padded_rows(rows: int) -> int:
    """The row count a prepacked GEMM runs at: a power of two up to 16, a multiple of 16 up to 256, of 64 above.

    oneDNN makes and caches a primitive for each row count a weight shape meets. Crops of every size and prefill
    chunks of every length bring ever new ones, and making one costs 0.3-2 ms, several times a small GEMM, while
    the two caches churn their 0.4-0.6 MB entries. Padded to these (at most 15 rows up to 256, where a small batch
    costs the weight's bandwidth more than its rows, and 63 above), every count up to a 4,096-token chunk shares 81
    primitives per weight shape, a bounded set where crops of new sizes made new ones without end. Measured, it is
    no faster: random row counts through the tiny checkpoint's GEMM shapes under inference mode took as long
    either way (89 s against 90-104 s for 4,000 rounds), and engine rounds ran as fast as before."""
    if rows <= 1:
        return rows
    if rows <= 16:
        return 1 << (rows - 1).bit_length()
    step = 16 if rows <= 256 else 64
    return -(-rows // step) * step


def packable_dtypes() -> frozenset[torch.dtype]:
    """fp32 always; bf16 where oneDNN has a bf16 GEMM for this CPU (AVX512BW/VL/DQ or AVX-NE-CONVERT): on AVX2 alone
    it refuses to reorder a bf16 weight."""
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return frozenset({torch.float32, torch.bfloat16})
    return frozenset({torch.float32})


class PrepackedLinear(nn.Module):
    """An nn.Linear whose weight oneDNN has reordered once for its GEMM, as vLLM's CPU backend does.

    F.linear repacks the weight on every call, which at decode sizes costs more than the arithmetic
    (the 103k-row lm_head most of all): the prepacked GEMM is about twice as fast there and no slower at
    prefill sizes. The packed tensor replaces the weight under its name: its shape, dtype and device are the
    weight's (what the model's readers ask), and reading its values fails loudly instead of keeping a second copy
    of every weight. A `shared` weight (a head tied to the embedding, which still looks rows up in it) stays as it is.
    """

    def __init__(self, linear: nn.Linear, batch_size: int, shared: bool = False) -> None:
        super().__init__()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_size)
        self.weight = linear.weight if shared else nn.Parameter(self.packed, requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        count, padded = rows.shape[0], padded_rows(rows.shape[0])
        if padded > count:
            rows = F.pad(rows, (0, 0, 0, padded - count))
        out = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [None], "")[:count]
        return out.view(*x.shape[:-1], out.shape[-1])


def prepack_linears(model: nn.Module, batch_size: int, linears: Linears = (nn.Linear,)) -> int:
    """Swap every CPU linear of `model` whose dtype oneDNN packs for a PrepackedLinear; returns how many.

    `linears` are the exact types whose forward is nn.Linear's (a model adds its own, such as stacked projections);
    a subclass not named there, a quantized linear, has a forward of its own and keeps it. One at a time, each
    original freed before the next is packed, so the model never takes twice its memory.
    """
    if not enabled() or not torch.backends.mkldnn.is_available():
        return 0
    dtypes, shared = packable_dtypes(), _weights_outside_linears(model, linears)
    targets = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
               if type(child) in linears and child.weight.device.type == "cpu" and child.weight.dtype in dtypes]
    for parent, name in targets:
        linear = parent._modules.pop(name)
        parent._modules[name] = PrepackedLinear(linear, batch_size, id(linear.weight) in shared)
        del linear
    return len(targets)


def _weights_outside_linears(model: nn.Module, linears: Linears) -> set[int]:
    """Parameters some other module reads too (a tied embedding): their float values must stay."""
    others = (module for module in model.modules() if type(module) not in linears)
    return {id(p) for module in others for p in module.parameters(recurse=False)}
