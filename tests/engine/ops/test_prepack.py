"""Prepacked linears give F.linear's results without keeping a second copy of their weights."""

from __future__ import annotations

import pytest
import torch

from pipeline.engine.model.loader import load_model
from pipeline.engine.model.paddleocr_vl import LINEARS, GeluLinear
from pipeline.engine.ops import prepack
from tests.tiny import tiny_spec


@pytest.mark.parametrize("rows", [0, 1, 2, 3, 8, 9, 32, 40, 256, 257, 300, 700])
def test_prepacked_linears_give_f_linear_results_for_every_batch_size(rows):
    model = torch.nn.Sequential(torch.nn.Linear(64, 1000), torch.nn.Linear(1000, 8, bias=False))
    x = torch.randn(rows, 64)
    expected = model(x)
    assert prepack.prepack_linears(model, batch_size=32) == 2
    assert isinstance(model[0], prepack.PrepackedLinear)
    assert set(dict(model.named_parameters())) == {"0.weight", "0.bias", "1.weight"}
    torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=1e-5)


def test_leading_dimensions_stay_the_inputs():
    model = torch.nn.Sequential(torch.nn.Linear(64, 96))
    x = torch.randn(3, 5, 64)
    expected = model(x)
    prepack.prepack_linears(model, batch_size=8)
    torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=1e-5)


def test_row_counts_are_padded_to_thirteen_that_cover_each_block_closely():
    """A oneDNN primitive is made for each row count a GEMM meets: every block of up to 256 rows shares 13 of them,
    none more than 31 rows larger, and a small block no more than twice its size."""
    padded = [prepack.padded_rows(rows) for rows in range(prepack.BLOCK_ROWS + 1)]
    assert padded[:18] == [0, 1, 2, 4, 4, 8, 8, 8, 8] + [16] * 8 + [32]
    assert (padded[32], padded[33], padded[256]) == (32, 64, 256)
    assert all(rows <= size < max(2 * rows, rows + 32) for rows, size in enumerate(padded) if rows)
    assert set(padded) - {0} == set(prepack.ROW_COUNTS) and len(prepack.ROW_COUNTS) == 13


def test_warming_runs_each_weight_shape_once_at_every_count_it_can_meet():
    """Weights of one shape (and bias, activation) share their primitives; a head that sees one row per sequence is
    warmed only up to its limit."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 1000, bias=False))
    prepack.prepack_linears(model, batch_size=8)
    assert prepack.warm_primitives(model) == 2 * len(prepack.ROW_COUNTS)
    assert prepack.warm_primitives(model, {model[2]: 5}) == len(prepack.ROW_COUNTS) + len([1, 2, 4, 8])


def test_a_linear_with_gelu_runs_it_inside_its_prepacked_gemm():
    linear = GeluLinear(64, 96)
    x = torch.randn(40, 64)
    expected = torch.nn.functional.gelu(torch.nn.functional.linear(x, linear.weight, linear.bias))
    model = torch.nn.Sequential(linear)
    assert prepack.prepack_linears(model, batch_size=8, linears=LINEARS) == 1
    assert model[0].activation == "gelu"
    torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=1e-5)


def test_a_prepacked_weight_is_the_packed_tensor_alone():
    """Shape, dtype and device stay the weight's (the model reads them); no float copy stays beside it."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 1000))
    prepack.prepack_linears(model, batch_size=16)
    weight = model[0].weight
    assert (weight.shape, weight.dtype, weight.device) == ((1000, 64), torch.float32, torch.device("cpu"))
    assert weight.is_mkldnn and model[0].packed.is_mkldnn
    with pytest.raises(NotImplementedError):
        weight.sum()


@pytest.mark.parametrize("tied", [False, True])
def test_a_prepacked_model_keeps_its_dtype_device_embeddings_and_logits(checkpoint_factory, tied):
    model = load_model(checkpoint_factory(tiny_spec(tied=tied, seed=1)))
    ids = torch.tensor([3, 1, 4, 1, 5])
    hidden = torch.randn(5, model.config.text.hidden_size)
    expected_embeds, expected_logits = model.embed(ids), model.logits(hidden)
    assert prepack.prepack_linears(model, batch_size=8, linears=LINEARS) > 0
    assert isinstance(model.lm_head, prepack.PrepackedLinear)
    assert (model.dtype, model.device) == (torch.float32, torch.device("cpu"))
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    torch.testing.assert_close(model.embed(ids), expected_embeds)
    torch.testing.assert_close(model.logits(hidden), expected_logits, atol=1e-4, rtol=1e-4)


def test_bf16_linears_stay_as_they_are_where_onednn_has_no_bf16_gemm(monkeypatch):
    monkeypatch.setattr(prepack, "packable_dtypes", lambda: frozenset({torch.float32}))
    model = torch.nn.Sequential(torch.nn.Linear(64, 100).bfloat16())
    assert prepack.prepack_linears(model, batch_size=16) == 0
    assert type(model[0]) is torch.nn.Linear


@pytest.mark.skipif(torch.bfloat16 not in prepack.packable_dtypes(), reason="no oneDNN bf16 GEMM on this CPU")
def test_bf16_linears_are_prepacked_where_onednn_has_a_bf16_gemm():
    model = torch.nn.Sequential(torch.nn.Linear(64, 1000).bfloat16(), torch.nn.Linear(1000, 8, bias=False).bfloat16())
    x = torch.randn(16, 64).bfloat16()
    expected = model(x)
    assert prepack.prepack_linears(model, batch_size=16) == 2
    assert model[0].weight.dtype == torch.bfloat16
    torch.testing.assert_close(model(x), expected, atol=2e-2, rtol=2e-2)


def test_linears_of_other_kinds_are_left_to_their_own_forward():
    class Quantized(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Quantized(64, 100))
    assert prepack.prepack_linears(model, batch_size=16) == 0
    assert type(model[0]) is Quantized
