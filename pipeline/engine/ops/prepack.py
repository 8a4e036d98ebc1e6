"""oneDNN-prepacked linears for a CPU model: each weight reordered once for oneDNN's GEMM instead of on every call."""

from __future__ import annotations

import torch
from torch import nn

from .extension import enabled

Linears = tuple[type[nn.Module], ...]


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
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [None], "")


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
