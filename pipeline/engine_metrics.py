"""Prometheus metric families for what only the process holding the engine can see: its cache and scheduler
counters (Engine.stats()) and GPU memory. The API serves them in the embedded mode; a GPU worker serves them on its
own port in the distributed mode (QUIRE_METRICS_PORT)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Engine.stats() keys that only ever grow; the rest are levels.
ENGINE_COUNTERS = frozenset({
    "block_evictions", "prefix_query_tokens", "prefix_hit_tokens", "encoder_cache_hits", "encoder_cache_misses",
    "encoder_cache_evictions", "vision_tower_calls", "vision_tower_images", "preemptions", "busy_ms",
    "decode_graph_steps", "schedule_ms", "prepare_ms", "forward_ms", "sample_ms", "update_ms", "steps",
    "step_sequences"})


def engine_families(stats: dict[str, int]) -> Iterator[Metric]:
    for name, value in sorted(stats.items()):
        if name in ENGINE_COUNTERS:
            yield CounterMetricFamily(f"quire_engine_{name}", f"engine {name.replace('_', ' ')}", value=value)
        else:
            yield GaugeMetricFamily(f"quire_engine_{name}", f"engine {name.replace('_', ' ')}", value=value)


def gpu_families() -> Iterator[Metric]:
    """Allocated and reserved CUDA memory, when this process has used CUDA (never initialises it just for this)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    memory = GaugeMetricFamily("quire_gpu_memory_bytes", "CUDA memory of this process", labels=["device", "kind"])
    for device in range(torch.cuda.device_count()):
        memory.add_metric([str(device), "allocated"], torch.cuda.memory_allocated(device))
        memory.add_metric([str(device), "reserved"], torch.cuda.memory_reserved(device))
    yield memory


class EngineCollector(Collector):
    """The engine's families, read at scrape time; nothing while the engine is not loaded yet."""

    def __init__(self, stats: Callable[[], dict[str, int] | None]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        if stats is not None:
            yield from engine_families(stats)
            yield from gpu_families()
