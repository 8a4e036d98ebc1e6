"""oneDNN-prepacked linears for a CPU model: each weight reordered once for oneDNN's GEMM instead of on every call."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .extension import enabled

Linears = dict[type[nn.Module], str]  # an exact module type: the activation its forward applies after nn.Linear's
# _linear_pointwise's post-op arguments for each activation a PrepackedLinear fuses into its GEMM
POST_OPS = {"none": ("none", [None], ""), "gelu": ("gelu", [], "none")}  # gelu: the exact (erf) one


BLOCK_ROWS = 256  # a GEMM runs on at most this many rows at a time


def padded_rows(rows: int) -> int:
    """The row count a prepacked GEMM runs a block of `rows` (at most BLOCK_ROWS) at: a power of two up to 32, a
    multiple of 32 above.

    oneDNN makes and caches a primitive for each row count a weight shape meets, 0.55 MB of host memory each
    whatever the shape (two copies of its descriptor). Crops of every size and prefill chunks of every length bring
    ever new counts, so a worker's memory rose by each one it first met, thousands of requests in (2.2 MB steps in a
    soak: four weight shapes at once). Padded to these and run in blocks of BLOCK_ROWS, every count shares 13
    primitives per weight shape, few enough to make them all before the first step (warm_primitives). Blocks and
    the coarser padding cost nothing measured: the 0.9B model's GEMM shapes at 150, 1,000 and 4,096 rows ran at
    0.95-1.07 of one call at the old padding in float32, within this machine's noise, and rounds of 48 crops
    through the tiny engine at 0.995 of the old code's time (median of 12 interleaved pairs)."""
    if rows <= 32:
        return 1 << (rows - 1).bit_length() if rows > 1 else rows
    return -(-rows // 32) * 32


ROW_COUNTS = tuple(sorted({padded_rows(rows) for rows in range(1, BLOCK_ROWS + 1)}))


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
    An `activation` runs inside the GEMM's primitive: standalone, oneDNN's erf-GELU made a primitive for every
    tensor shape it met (155 in 20 batches of crops), each evicting a GEMM's from the bounded cache.
    """

    def __init__(self, linear: nn.Linear, batch_size: int, shared: bool = False, activation: str = "none") -> None:
        super().__init__()
        self.activation = activation
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_size)
        self.weight = linear.weight if shared else nn.Parameter(self.packed, requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] <= BLOCK_ROWS:
            out = self._gemm(rows)
        else:
            out = torch.cat([self._gemm(block) for block in rows.split(BLOCK_ROWS)])
        return out.view(*x.shape[:-1], out.shape[-1])

    def _gemm(self, rows: torch.Tensor) -> torch.Tensor:
        count, padded = rows.shape[0], padded_rows(rows.shape[0])
        if padded > count:
            rows = F.pad(rows, (0, 0, 0, padded - count))
        return torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, *POST_OPS[self.activation])[:count]


def prepack_linears(model: nn.Module, batch_size: int, linears: Linears | None = None) -> int:
    """Swap every CPU linear of `model` whose dtype oneDNN packs for a PrepackedLinear; returns how many.

    `linears` are the exact types whose forward is nn.Linear's, each with the activation it applies after it (a
    model adds its own, such as stacked projections); a subclass not named there, a quantized linear, has a forward
    of its own and keeps it. One at a time, each original freed before the next is packed, so the model never takes
    twice its memory.
    """
    if not enabled() or not torch.backends.mkldnn.is_available():
        return 0
    linears = linears or {nn.Linear: "none"}
    dtypes, shared = packable_dtypes(), _weights_outside_linears(model, linears)
    targets = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
               if type(child) in linears and child.weight.device.type == "cpu" and child.weight.dtype in dtypes]
    for parent, name in targets:
        linear = parent._modules.pop(name)
        parent._modules[name] = PrepackedLinear(linear, batch_size, id(linear.weight) in shared, linears[type(linear)])
        del linear
    return len(targets)


def warm_primitives(model: nn.Module, max_rows: dict[nn.Module, int] | None = None) -> int:
    """Run each PrepackedLinear weight shape of `model` once at every row count it can meet (ROW_COUNTS, or those up
    to `max_rows[linear]` for a linear that never sees more rows, a head that sees one row per sequence); returns
    how many GEMMs ran.

    Each makes its oneDNN primitive now, where a worker would otherwise make it the first time a request brought
    that count, and hold the memory from then on. oneDNN keys a primitive on the thread count too, so this runs in
    the thread that will run the steps, at the thread count it runs them with."""
    limits, most = max_rows or {}, {}
    for linear in model.modules():
        if isinstance(linear, PrepackedLinear):
            key = (tuple(linear.packed.shape), linear.packed.dtype, linear.bias is not None, linear.activation)
            rows = padded_rows(min(limits.get(linear, BLOCK_ROWS), BLOCK_ROWS))
            most[key] = linear, max(rows, most.get(key, (linear, 0))[1])
    runs = [(linear, count) for linear, rows in most.values() for count in ROW_COUNTS if count <= rows]
    with torch.inference_mode():
        for linear, count in runs:
            linear(torch.zeros(count, linear.packed.shape[1], dtype=linear.packed.dtype))
    return len(runs)


def _weights_outside_linears(model: nn.Module, linears: Linears) -> set[int]:
    """Parameters some other module reads too (a tied embedding): their float values must stay."""
    others = (module for module in model.modules() if type(module) not in linears)
    return {id(p) for module in others for p in module.parameters(recurse=False)}
