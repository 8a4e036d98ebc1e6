"""What the settings ask of the engine and of the models beside it, in one place, so that the CLI, the embedded
service and the workers build the same engine from the same QUIRE_* variables: Engine.from_pretrained's keywords,
the pages in recognition at once that keep its batch full, and the layout model's device.

`auto` and None stay as they are in the keywords: the engine resolves them itself (pipeline/engine/devices.py);
the thread count and the layout device resolve them the same way, before the engine exists.
"""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.engine.devices import MAX_NUM_SEQS, default_for, resolve_device
from pipeline.engine.model.quantization import DEFAULT_GROUP_SIZE
from pipeline.engine.prompts import TASK_PROMPTS

# what measured best on a CPU (benchmarks/service_overhead.py: engine busy 73 % with 2 pages, 82 % with 8)
MIN_GPU_THREADS = 8
SEQUENCES_PER_PAGE = 4  # regions a page brings to the engine, counted low: text pages bring more, pictures fewer
# tasks whose regions are short by nature (a seal holds a few dozen characters, a formula region one equation or a
# few): a lower cap there bounds a runaway decode that the repetition guard cannot see (one that never repeats)
SHORT_TASKS = {"formula": 4096, "seal": 1024}


def engine_kwargs(settings: Settings) -> dict[str, object]:
    """Engine.from_pretrained's keywords from the settings (a command's --device or --dtype is applied to the
    settings first, so the layout device follows it too)."""
    return {"device": settings.device, "dtype": settings.dtype, "max_num_seqs": settings.max_num_seqs,
            "max_num_batched_tokens": settings.max_num_batched_tokens, "kv_cache_memory": settings.kv_cache_memory,
            "gpu_memory_fraction": settings.kv_cache_fraction, "prefix_cache_tokens": settings.prefix_cache_tokens,
            "onednn_cache_entries": settings.onednn_cache_entries, "cuda_graphs": settings.cuda_graphs,
            "quantization": settings.quantization, "group_size": settings.quantization_group_size}


def weights_scheme(settings: Settings) -> str:
    """How the weights are quantized as they load (none, int8, int4-g64), part of the revision that keys cached
    results: a quantized model's results are not the float model's."""
    if settings.quantization == "int4":
        return f"int4-g{settings.quantization_group_size or DEFAULT_GROUP_SIZE}"
    return settings.quantization


def task_max_tokens(settings: Settings, override: int | None = None) -> dict[str, int]:
    """Generated tokens at most per task: `override` (a command's --max-tokens) for all, else QUIRE_TASK_MAX_TOKENS's
    value for the task, else QUIRE_MAX_TOKENS (SHORT_TASKS' lower cap where it is lower)."""
    return {task: override or settings.task_max_tokens.get(task)
            or min(settings.max_tokens, SHORT_TASKS.get(task, settings.max_tokens)) for task in TASK_PROMPTS}


def max_num_seqs(settings: Settings) -> int:
    """The engine's batch as the engine will resolve it: QUIRE_MAX_NUM_SEQS, else its device's default."""
    return settings.max_num_seqs or default_for(MAX_NUM_SEQS, resolve_device(settings.device))


def gpu_threads(settings: Settings) -> int:
    """Pages in recognition at once (the embedded GPU pool, a GPU worker's concurrency): QUIRE_GPU_THREADS, else
    enough pages to fill the engine's batch.

    Each page's regions are sequences in the batch, and a page leaves it only when its last region is done, so fewer
    pages than max_num_seqs / SEQUENCES_PER_PAGE leave sequences idle: 64 pages for CUDA's 256, and the measured 8 on
    a CPU.
    """
    return settings.gpu_threads or max(MIN_GPU_THREADS, max_num_seqs(settings) // SEQUENCES_PER_PAGE)


def pages_in_flight(settings: Settings) -> int:
    """Pages `quire process` keeps between their render and their output: QUIRE_PAGES_IN_FLIGHT, else, as for
    gpu_threads, enough pages to fill the engine's batch (and never fewer than a CPU's measured 16)."""
    return settings.pages_in_flight or max(16, max_num_seqs(settings) // SEQUENCES_PER_PAGE)


def layout_device(settings: Settings) -> str:
    """Where the layout model runs: QUIRE_LAYOUT_DEVICE, else the engine's device, `auto` resolved (the GPU when
    torch sees one), so a GPU worker that runs the prepare stage lays pages out on its GPU."""
    return str(resolve_device(settings.layout_device or settings.device))
