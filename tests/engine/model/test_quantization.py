"""Weight-only int8/int4 quantization: quantized linears compute what their dequantized weights do, close to the
float ones; only the decoder's linears and the head are quantized; a `quire models quantize` checkpoint loads to the
same bits and greedy tokens as quantizing at load; a quantized engine batches exactly as it runs alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from pipeline import cli
from pipeline.engine.core import EngineConfig
from pipeline.engine.engine import Engine
from pipeline.engine.model import quantization
from pipeline.engine.model.errors import CheckpointError
from pipeline.engine.model.loader import load_model
from pipeline.engine.model.paddleocr_vl import PaddleOCRVL, StackedLinear
from pipeline.engine.model.quantization import (
    Int4Linear,
    Int8Linear,
    Quantization,
    QuantizedLinear,
    install,
    quantized_weight_bytes,
)
from pipeline.engine.model.rope import get_rope_index
from pipeline.engine.processor import Processor
from pipeline.engine.request import Request
from pipeline.samples.tiny_checkpoint import TinySpec
from tests.reference import ContiguousKV, random_image, user_turn
from tests.tiny import tiny_spec

INT8, INT4_32, INT4_64 = Quantization.parse("int8"), Quantization.parse("int4", 32), Quantization.parse("int4", 64)
MAX_WEIGHT_ERROR = {"int8": 0.01, "int4": 0.11}


def quantized(linear: nn.Linear, scheme: Quantization, dtype: torch.dtype, packed: bool = True) -> QuantizedLinear:
    """`linear` quantized as the loader does it: empty module, stored tensors filled, then finished."""
    module = scheme.module(linear, dtype, torch.device("cpu"))
    for name, tensor in scheme.quantize(linear.weight).items():
        module.fill(name, tensor)
    if packed:
        module.finish()
    return module


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return ((ours.float() - reference.float()).norm() / reference.float().norm()).item()


SHAPES = {"qkv_proj": (64, [("q_proj", 64), ("k_proj", 32), ("v_proj", 32)]),
          "gate_up_proj": (64, [("gate_proj", 128), ("up_proj", 128)]),
          "down_proj": (256, [("down_proj", 64)]), "wide": (128, [("lm_head", 1024)])}


@pytest.mark.parametrize("scheme", [INT8, INT4_32, INT4_64, Quantization.parse("int4", 128)], ids=str)
@pytest.mark.parametrize("shape", [name for name in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_quantized_linear_is_its_dequantized_weight_and_close_to_the_float_one(scheme, shape, dtype):
    in_features, parts = SHAPES[shape]
    if in_features % (scheme.group_size or 1):
        pytest.skip("the group size does not divide this width")
    torch.manual_seed(0)
    linear = StackedLinear(in_features, parts).to(dtype)
    module, unpacked = quantized(linear, scheme, dtype), quantized(linear, scheme, dtype, packed=False)
    weight = unpacked.dequantize()
    assert relative_error(weight, linear.weight) <= MAX_WEIGHT_ERROR[scheme.method]
    for rows in (1, 7, 300):
        x = torch.randn(rows, in_features).to(dtype)
        out = module(x)  # the extension's panel kernel on fp32 activations, else torch's on bf16 ones
        assert out.dtype == dtype and out.shape == (rows, linear.out_features)
        assert relative_error(out, x.float() @ weight.float().T) <= 0.01
    if isinstance(unpacked, Int4Linear):  # where no kernel takes the weight, it is dequantized on every call
        assert torch.equal(unpacked(x), x @ weight.T)


@pytest.mark.parametrize("scheme", [INT8, INT4_32, INT4_64], ids=str)
def test_torch_kernels_serve_where_the_extension_does_not_and_agree_with_it(scheme, monkeypatch):
    torch.manual_seed(0)
    linear = StackedLinear(128, [("gate_proj", 200), ("up_proj", 200)])
    panels = quantized(linear, scheme, torch.float32)
    monkeypatch.setattr(quantization, "panel_extension", lambda device: None)
    fallback = quantized(linear, scheme, torch.float32)
    assert panels.panel_op is not None and fallback.panel_op is None and fallback.kernel
    x = torch.randn(9, 128)
    assert relative_error(panels(x), fallback(x)) <= 0.01


def test_an_int8_weight_in_panels_dequantizes_to_the_weight_as_filled():
    linear = nn.Linear(64, 40, bias=False)
    assert torch.equal(quantized(linear, INT8, torch.float32).dequantize(),
                       quantized(linear, INT8, torch.float32, packed=False).dequantize())


@pytest.mark.parametrize("scheme", [INT8, INT4_32], ids=str)
def test_a_stacked_projection_quantized_part_by_part_equals_the_stack_quantized_whole(scheme):
    torch.manual_seed(0)
    parts = [torch.randn(64, 64), torch.randn(32, 64), torch.randn(32, 64)]
    whole = scheme.quantize(torch.cat(parts))
    by_part = [scheme.quantize(part) for part in parts]
    for name, tensor in whole.items():
        assert torch.equal(tensor, torch.cat([part[name] for part in by_part]))


def test_smaller_int4_groups_err_less_and_int8_least():
    torch.manual_seed(0)
    weight = torch.randn(256, 512)
    errors = [relative_error(_dequantized(weight, scheme), weight)
              for scheme in (Quantization.parse("int4", 128), INT4_64, INT4_32, INT8)]
    assert errors == sorted(errors, reverse=True)
    assert errors[0] <= 0.11 and errors[-1] <= 0.01


def _dequantized(weight: torch.Tensor, scheme: Quantization) -> torch.Tensor:
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data = weight
    return quantized(linear, scheme, torch.float32, packed=False).dequantize()


def test_unknown_names_and_unsupported_group_sizes_are_refused(tiny_checkpoint):
    with pytest.raises(ValueError, match="unknown quantization 'int3': use one of none, int8, int4"):
        load_model(tiny_checkpoint, quantization="int3")
    with pytest.raises(ValueError, match="unsupported int4 group size 48: use one of 32, 64, 128"):
        load_model(tiny_checkpoint, quantization="int4", group_size=48)
    with pytest.raises(ValueError, match="a group size applies to int4 only"):
        load_model(tiny_checkpoint, quantization="int8", group_size=64)


def test_a_group_size_that_does_not_divide_a_layer_width_names_the_layer_and_the_valid_sizes():
    with torch.device("meta"):
        model = PaddleOCRVL(TinySpec(text_hidden=96).model_config())
    with pytest.raises(ValueError, match=r"model\.layers\.0\.self_attn\.qkv_proj: input width 96 is not a multiple "
                                         r"of the int4 group size 64; valid group sizes for it: 32$"):
        install(model, INT4_64, torch.float32, torch.device("cpu"))


@pytest.mark.parametrize("scheme", [INT8, INT4_32], ids=str)
def test_only_the_decoder_linears_and_the_head_are_quantized(tiny_checkpoint, scheme):
    model = load_model(tiny_checkpoint, quantization=scheme.method, group_size=scheme.group_size)
    quantized_names = {name for name, module in model.named_modules() if isinstance(module, QuantizedLinear)}
    layers = model.config.text.num_hidden_layers
    assert quantized_names == {"lm_head"} | {f"model.layers.{i}.{linear}" for i in range(layers) for linear in (
        "self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(isinstance(m, Int8Linear if scheme is INT8 else Int4Linear) for m in model.modules()
               if isinstance(m, QuantizedLinear))


def test_a_tied_head_is_quantized_on_its_own_and_the_embedding_stays_float(checkpoint_factory):
    tied = checkpoint_factory(tiny_spec(tied=True, seed=1))
    model = load_model(tied, quantization="int8")
    assert isinstance(model.lm_head, Int8Linear) and model.model.embed_tokens.weight.dtype == torch.float32
    weight = model.model.embed_tokens.weight
    assert relative_error(model.lm_head.dequantize(), weight) <= MAX_WEIGHT_ERROR["int8"]


@pytest.mark.parametrize(("method", "group_size", "ratio"), [("int8", None, 0.52), ("int4", 32, 0.35),
                                                              ("int4", 64, 0.30)])
def test_quantized_weight_bytes_against_bf16_scales_and_zeros_counted(tiny_checkpoint, method, group_size, ratio):
    bf16 = quantized_weight_bytes(load_model(tiny_checkpoint, dtype=torch.bfloat16))
    assert quantized_weight_bytes(load_model(tiny_checkpoint, quantization=method, group_size=group_size)) <= \
        ratio * bf16


def _prompt_logits(model: PaddleOCRVL, processor: Processor) -> torch.Tensor:
    prompt = processor.encode_messages([{"role": "user", "content": "Summarise the invoice: total amount due."}])
    positions, _ = get_rope_index(prompt.input_ids, prompt.grids, model.config.image_token_id)
    embeds = model.embed(torch.tensor(prompt.input_ids))
    with torch.no_grad():
        return model.logits(model(embeds, positions, ContiguousKV(model.config.text.num_hidden_layers)))


@pytest.mark.parametrize(("method", "group_size", "budget"), [("int8", None, 0.02), ("int4", 32, 0.10),
                                                               ("int4", 64, 0.10)])
def test_logits_stay_within_the_error_budget(tiny_checkpoint, method, group_size, budget):
    """The head alone, on the float model's final hidden states, meets the budget. The whole random decoder then
    amplifies any weight error, quantized or Gaussian noise of the same size alike (about 2.5× for these two layers,
    5× for 18 at real shapes), so the prompt's logits get that much more; trained weights amplify far less."""
    processor = Processor.from_pretrained(tiny_checkpoint)
    float_model = load_model(tiny_checkpoint)
    model = load_model(tiny_checkpoint, quantization=method, group_size=group_size)
    hidden = torch.randn(32, float_model.config.text.hidden_size, generator=torch.Generator().manual_seed(0))
    assert relative_error(model.logits(hidden), float_model.logits(hidden)) <= budget
    reference = _prompt_logits(float_model, processor)
    assert relative_error(_prompt_logits(model, processor), reference) <= 2.5 * budget


def _requests() -> list[Request]:
    return [Request(images=[random_image(60 + 20 * i, 40 + 10 * i, seed=i)], max_tokens=10, ignore_eos=True)
            for i in range(3)] + [Request(messages=user_turn("Table Recognition:", [random_image(50, 50, seed=9)]),
                                          max_tokens=12, ignore_eos=True)]


def _tokens(model: PaddleOCRVL, directory: Path, requests: list[Request]) -> list[list[int]]:
    engine = Engine(model, Processor.from_pretrained(directory), EngineConfig(block_size=4, num_blocks=256))
    return [out.token_ids for out in engine.generate(requests)]


@pytest.fixture(scope="module", params=[("int8", None), ("int4", 32)], ids=["int8", "int4"])
def quantized_copy(request, tiny_checkpoint, tmp_path_factory) -> tuple[Path, str, int | None]:
    method, group_size = request.param
    out = tmp_path_factory.mktemp("quantized") / method
    argv = ["models", "quantize", str(tiny_checkpoint), str(out), "--quantization", method]
    assert cli.main(argv + (["--group-size", str(group_size)] if group_size else [])) == 0
    return out, method, group_size


def test_a_quantized_checkpoint_is_complete_and_marked(quantized_copy, tiny_checkpoint):
    out, method, group_size = quantized_copy
    assert {f.name for f in tiny_checkpoint.iterdir()} == {f.name for f in out.iterdir()}
    marker = json.loads((out / "config.json").read_text())["quantization_config"]
    assert marker == {"quant_method": "quire", "quantization": method} | ({"group_size": group_size}
                                                                          if group_size else {})


def test_a_saved_checkpoint_loads_to_the_same_bits_and_greedy_tokens_as_quantizing_at_load(
    quantized_copy, tiny_checkpoint
):
    out, method, group_size = quantized_copy
    at_load = load_model(tiny_checkpoint, quantization=method, group_size=group_size)
    saved = load_model(out)
    expected = at_load.state_dict()
    assert saved.state_dict().keys() == expected.keys()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in saved.state_dict().items())
    assert _tokens(saved, out, _requests()) == _tokens(at_load, tiny_checkpoint, _requests())


def test_a_quantized_checkpoint_loads_in_its_own_scheme_and_refuses_another(quantized_copy):
    out, method, group_size = quantized_copy
    assert isinstance(load_model(out, quantization="none").lm_head, QuantizedLinear)
    assert isinstance(load_model(out, quantization=method).lm_head, QuantizedLinear)
    other = "int4" if method == "int8" else "int8"
    with pytest.raises(CheckpointError, match=f"is quantized {method}.* cannot be loaded as {other}"):
        load_model(out, quantization=other)
    if group_size:
        with pytest.raises(CheckpointError, match="cannot be loaded as int4 \\(group size 64\\)"):
            load_model(out, quantization="int4", group_size=64)


def test_quantizing_a_quantized_checkpoint_again_is_refused_and_writes_nothing(quantized_copy, tmp_path, capsys):
    out, _, _ = quantized_copy
    assert cli.main(["models", "quantize", str(out), str(tmp_path / "again"), "--quantization", "int8"]) == 1
    assert "is already quantized" in capsys.readouterr().err and not (tmp_path / "again").exists()


@pytest.mark.parametrize(("method", "group_size"), [("int8", None), ("int4", 32)])
def test_a_quantized_engine_batches_exactly_as_it_runs_each_request_alone(tiny_checkpoint, method, group_size):
    model = load_model(tiny_checkpoint, quantization=method, group_size=group_size)
    requests = _requests()
    alone = [_tokens(model, tiny_checkpoint, [request])[0] for request in requests]
    assert _tokens(model, tiny_checkpoint, requests) == alone
