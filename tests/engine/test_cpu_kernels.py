"""The CPU extension: its paged-decode kernel gives what the torch path gives, for any block layout and dtype; its
int8/int4 linears give the dequantized weight's products, each row's independent of its batch; prepacked linears give
F.linear's results without keeping a second copy of their weights; OpenMP threads are sized to the cores the process
may use and bound one per core."""

from __future__ import annotations

import os
import shutil
import threading

import pytest
import torch

from pipeline.engine import cpu_kernels
from pipeline.engine import engine as engine_module
from pipeline.engine.attention import Chunk, PagedAttention, PagedKVCache, decode_attention
from pipeline.engine.engine import Engine
from pipeline.engine.model.loader import load_model
from pipeline.engine.model.quantization import Quantization, to_panels, unpack_int4
from tests.tiny import tiny_spec

HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 16, 4


@pytest.fixture(scope="module")
def kernel():
    module = cpu_kernels.extension_module()
    assert module is not None, "this machine has a compiler and ninja: the kernel must build"
    return module


def _pools(blocks: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (blocks, BLOCK, KV_HEADS, DIM)
    return torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)


def _reference(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: list[int], length: int):
    keys = k_pool[table].flatten(0, 1)[:length].float()
    values = v_pool[table].flatten(0, 1)[:length].float()
    return decode_attention(q.float(), keys, values)


def test_scattered_block_tables_of_mixed_lengths_match_the_torch_path(kernel):
    k_pool, v_pool = _pools(64)
    lengths = [1, 3, 4, 5, 17, 40]
    order = torch.randperm(64, generator=torch.Generator().manual_seed(1)).tolist()
    tables, cursor = [], 0
    for length in lengths:
        count = -(-length // BLOCK)
        tables.append(order[cursor:cursor + count] + [0] * (10 - count))
        cursor += count
    q = torch.randn(len(lengths), HEADS, DIM)
    out = kernel.paged_decode(q, k_pool, v_pool, torch.tensor(tables), torch.tensor(lengths), DIM ** -0.5)
    for row, length in enumerate(lengths):
        expected = _reference(q[row], k_pool, v_pool, tables[row][:-(-length // BLOCK)], length)
        torch.testing.assert_close(out[row], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_pools_accumulate_in_fp32(kernel, dtype):
    k_pool, v_pool = _pools(16, dtype=dtype)
    q = torch.randn(2, HEADS, DIM).to(dtype)
    tables, lengths = [[3, 7, 1, 0], [5, 2, 9, 11]], [10, 16]
    out = kernel.paged_decode(q, k_pool, v_pool, torch.tensor(tables), torch.tensor(lengths), DIM ** -0.5)
    assert out.dtype == dtype
    for row, length in enumerate(lengths):
        expected = _reference(q[row], k_pool, v_pool, tables[row], length)
        torch.testing.assert_close(out[row].float(), expected, atol=2e-2, rtol=2e-2)


def test_a_mixed_step_is_the_same_with_and_without_the_kernel(kernel):
    """Decode rows go to the kernel, prefill chunks stay on SDPA; the step's output does not change."""
    cache = PagedKVCache(1, 32, BLOCK, KV_HEADS, DIM, torch.float32, "cpu")
    cache.k.copy_(torch.randn_like(cache.k))
    cache.v.copy_(torch.randn_like(cache.v))
    chunks = [Chunk(0, 1, 9, [4, 9, 2], torch.device("cpu")), Chunk(1, 5, 7, [10, 11], torch.device("cpu")),
              Chunk(6, 1, 13, [20, 21, 22, 23], torch.device("cpu"))]
    slots = torch.tensor([2 * BLOCK + 0] + [10 * BLOCK + i for i in range(2, 4)] + [11 * BLOCK + i for i in range(3)]
                         + [23 * BLOCK + 0])
    q, k, v = torch.randn(7, HEADS, DIM), torch.randn(7, KV_HEADS, DIM), torch.randn(7, KV_HEADS, DIM)
    fused = PagedAttention(cache, slots, chunks, kernel)(0, q, k, v)
    looped = PagedAttention(cache, slots, chunks)(0, q, k, v)
    torch.testing.assert_close(fused, looped, atol=1e-5, rtol=1e-5)


def test_the_kernel_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("QUIRE_CPU_KERNELS", "0")
    cpu_kernels.extension_module.cache_clear()
    try:
        assert cpu_kernels.extension_module() is None
    finally:
        cpu_kernels.extension_module.cache_clear()


def _quantized_weight(scheme: Quantization, rows: int, width: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """A random weight's stored tensors, and the fp32 weight they stand for."""
    weight = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows + width))
    stored = scheme.quantize(weight)
    if scheme.group_size is None:
        return stored, stored["qweight"].float() * stored["scales"].float()[:, None]
    levels = unpack_int4(stored["qweight"]).float().reshape(rows, -1, scheme.group_size)
    scales, zeros = stored["scales"].float()[..., None], stored["zeros"].float()[..., None]
    return stored, ((levels - 8) * scales + zeros).reshape(rows, width)


def _panel_call(kernel, scheme: Quantization, stored: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    rows = stored["scales"].shape[0]
    if scheme.group_size is None:
        return kernel.int8_linear(x, to_panels(stored["qweight"]), stored["scales"], rows)
    levels = to_panels(unpack_int4(stored["qweight"]))
    packed = levels[..., :8] | levels[..., 8:] << 4
    return kernel.int4_linear(x, packed, to_panels(stored["scales"]), to_panels(stored["zeros"]), scheme.group_size,
                              rows)


PANEL_SCHEMES = [Quantization.parse("int8")] + [Quantization.parse("int4", size) for size in (32, 64, 128)]


@pytest.mark.parametrize("scheme", PANEL_SCHEMES, ids=str)
@pytest.mark.parametrize(("rows", "width"), [(40, 128), (1024, 256), (17, 384), (48, 3072)])
@pytest.mark.parametrize("batch", [1, 3, 16, 33])
def test_panel_kernels_match_the_dequantized_weight_in_fp32(kernel, scheme, rows, width, batch):
    stored, weight = _quantized_weight(scheme, rows, width)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(batch))
    out = _panel_call(kernel, scheme, stored, x)
    torch.testing.assert_close(out, x @ weight.T, atol=1e-5 * width ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("scheme", PANEL_SCHEMES, ids=str)
def test_a_row_gets_the_same_bits_alone_and_in_any_batch(kernel, scheme):
    """The engine's batching parity rests on this: a row's sums never depend on the rows beside it."""
    stored, _ = _quantized_weight(scheme, 72, 512)
    x = torch.randn(33, 512, generator=torch.Generator().manual_seed(0))
    batched = _panel_call(kernel, scheme, stored, x)
    for start, stop in ((0, 1), (5, 6), (0, 7), (9, 25), (32, 33)):
        assert torch.equal(_panel_call(kernel, scheme, stored, x[start:stop]), batched[start:stop])


def test_an_int4_width_the_group_size_does_not_divide_is_refused(kernel):
    stored, _ = _quantized_weight(Quantization.parse("int4", 32), 16, 96)
    with pytest.raises(RuntimeError, match="group size must divide 256 and K"):
        _panel_call(kernel, Quantization.parse("int4", 64), stored, torch.randn(2, 96))


def test_activations_other_than_contiguous_fp32_are_refused(kernel):
    scheme = Quantization.parse("int8")
    stored, _ = _quantized_weight(scheme, 16, 64)
    for x in (torch.randn(2, 64, dtype=torch.bfloat16), torch.randn(64, 2).T, torch.randn(2, 32)):
        with pytest.raises(RuntimeError):
            _panel_call(kernel, scheme, stored, x)


@pytest.mark.parametrize("rows", [1, 2, 8, 9, 32, 40])
def test_prepacked_linears_give_f_linear_results_for_every_batch_size(rows):
    model = torch.nn.Sequential(torch.nn.Linear(64, 1000), torch.nn.Linear(1000, 8, bias=False))
    x = torch.randn(rows, 64)
    expected = model(x)
    assert cpu_kernels.prepack_linears(model, batch_size=32) == 2
    assert isinstance(model[0], cpu_kernels.PrepackedLinear)
    assert set(dict(model.named_parameters())) == {"0.weight", "0.bias", "1.weight"}
    torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=1e-5)


def test_a_prepacked_weight_is_the_packed_tensor_alone():
    """Shape, dtype and device stay the weight's (the model reads them); no float copy stays beside it."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 1000))
    cpu_kernels.prepack_linears(model, batch_size=16)
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
    assert cpu_kernels.prepack_linears(model, batch_size=8) > 0
    assert isinstance(model.lm_head, cpu_kernels.PrepackedLinear)
    assert (model.dtype, model.device) == (torch.float32, torch.device("cpu"))
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    torch.testing.assert_close(model.embed(ids), expected_embeds)
    torch.testing.assert_close(model.logits(hidden), expected_logits, atol=1e-4, rtol=1e-4)


def test_bf16_linears_stay_as_they_are_where_onednn_has_no_bf16_gemm(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "packable_dtypes", lambda: frozenset({torch.float32}))
    model = torch.nn.Sequential(torch.nn.Linear(64, 100).bfloat16())
    assert cpu_kernels.prepack_linears(model, batch_size=16) == 0
    assert type(model[0]) is torch.nn.Linear


@pytest.mark.skipif(torch.bfloat16 not in cpu_kernels.packable_dtypes(), reason="no oneDNN bf16 GEMM on this CPU")
def test_bf16_linears_are_prepacked_where_onednn_has_a_bf16_gemm():
    model = torch.nn.Sequential(torch.nn.Linear(64, 1000).bfloat16(), torch.nn.Linear(1000, 8, bias=False).bfloat16())
    x = torch.randn(16, 64).bfloat16()
    expected = model(x)
    assert cpu_kernels.prepack_linears(model, batch_size=16) == 2
    assert model[0].weight.dtype == torch.bfloat16
    torch.testing.assert_close(model(x), expected, atol=2e-2, rtol=2e-2)


def test_linears_of_other_kinds_are_left_to_their_own_forward():
    class Quantized(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Quantized(64, 100))
    assert cpu_kernels.prepack_linears(model, batch_size=16) == 0
    assert type(model[0]) is Quantized


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _in_a_thread(work):
    """Run `work` in a fresh thread, as the engine's loop runs the model: OpenMP keeps a thread count and a team per
    thread that starts parallel work. Returns its result, the thread's own CPU mask and its thread count."""
    result = {}

    def run():
        result.update(value=work(), own=os.sched_getaffinity(0), threads=torch.get_num_threads())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result["value"], result["own"], result["threads"]


def test_threads_are_one_per_allowed_core_each_worker_bound_to_its_own(kernel, restore_threads):
    def bind_and_read_masks() -> list[tuple[int, set[int]]]:
        """Each bound worker's CPU and mask, read while the team lives (it ends with the thread that started it)."""
        return [(cpu, os.sched_getaffinity(tid)) for tid, cpu in cpu_kernels.configure_cpu_threads()]

    cores = cpu_kernels.allowed_cores()
    masks, own, threads = _in_a_thread(bind_and_read_masks)
    assert threads == len(cores)
    assert [cpu for cpu, _ in masks] == cores[1:]
    assert all(mask == {cpu} for cpu, mask in masks)
    assert own == os.sched_getaffinity(0), "the calling thread stays free: threads it starts inherit its mask"


def test_an_explicit_thread_count_is_kept(monkeypatch, restore_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _in_a_thread(cpu_kernels.configure_cpu_threads)[2] == 1
    assert _in_a_thread(lambda: cpu_kernels.configure_cpu_threads(threads=2))[2] == 2


def test_without_the_extension_threads_are_sized_but_not_bound(monkeypatch, restore_threads):
    monkeypatch.setattr(cpu_kernels, "extension_module", lambda: None)
    bound, _, threads = _in_a_thread(cpu_kernels.configure_cpu_threads)
    assert bound == [] and threads == len(cpu_kernels.allowed_cores())


def test_smt_siblings_count_as_one_core():
    siblings = {0: "core0", 1: "core1", 2: "core0", 3: "core1"}
    assert cpu_kernels.one_per_core([0, 1, 2, 3], siblings.__getitem__) == [0, 1]


@pytest.mark.parametrize(("value", "threads"), [("4", 4), ("4,2", 4), ("", None), ("0", None), ("many", None)])
def test_omp_num_threads_is_read_at_its_first_level(monkeypatch, value, threads):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert cpu_kernels.omp_num_threads() == threads


def test_the_pip_ninja_serves_where_the_system_has_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    cpu_kernels.ensure_ninja_on_path()
    assert shutil.which("ninja") is not None


def test_an_engine_is_built_without_parallel_torch_work_in_the_building_thread(tiny_checkpoint, monkeypatch):
    """The loop thread's OpenMP pool must be the process's only one: a second, left by the thread that loaded the
    model, made every step 35-55 % slower (serial_torch's docstring)."""
    seen = []
    real = cpu_kernels.prepack_linears
    monkeypatch.setattr(engine_module, "prepack_linears", lambda *args: seen.append(torch.get_num_threads())
                        or real(*args))
    threads = torch.get_num_threads()
    Engine.from_pretrained(tiny_checkpoint).close()
    assert seen == [1] and torch.get_num_threads() == threads
