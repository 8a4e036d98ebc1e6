"""The engine's synchronous core: many requests in flight, continuously batched over a paged KV cache.

`add_request` / `step` / `abort` drive it from one thread; `generate` runs an offline batch. A step schedules,
prepares the batch, runs the model, samples and applies the tokens; engine.py runs these steps on a background
thread for callers that share one engine.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Self

import torch

from .detokenizer import IncrementalDetokenizer
from .devices import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS, default_for, resolve_device, resolve_dtype
from .encoder_cache import EncoderCache, image_hash
from .host_memory import ONEDNN_CACHE_ENTRIES, bound_onednn_caches
from .kv_cache import PagedKVCache
from .model.loader import load_model, resolve_checkpoint
from .model.paddleocr_vl import LINEARS, PaddleOCRVL
from .model.rope import get_rope_index
from .ops.cpu_threads import allowed_cores, configure_cpu_threads, serial_torch
from .ops.prepack import prepack_linears, warm_primitives
from .phase_clock import PhaseClock
from .processor import Processor, Prompt
from .request import Delta, EngineError, Output, Request
from .runner import ModelRunner
from .sampling import sample
from .scheduler import Scheduler, SchedulerConfig, Step
from .sequence import ImageSpan, Sequence
from .stopping import StopRules


@dataclass(frozen=True)
class EngineConfig:
    """What the engine is asked for; `auto` and None are filled in for the model's device by `resolved`."""

    device: str = "auto"
    dtype: str = "auto"
    block_size: int = 16
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_memory: int | None = None
    gpu_memory_fraction: float = 0.8
    num_blocks: int | None = None
    enable_prefix_caching: bool = True
    prefix_cache_tokens: int = 262144  # finished requests' KV kept findable: 10-18 MB of host memory
    encoder_cache_tokens: int = 16384
    onednn_cache_entries: int = ONEDNN_CACHE_ENTRIES  # CPU GEMM primitives kept per cache (host_memory.py)
    cuda_graphs: bool = True
    attention: str = "auto"
    quantization: str = "none"  # none | int8 | int4: the decoder's and head's weights (model/quantization.py)
    group_size: int | None = None  # int4's group; None: its default

    def resolved(self, device: torch.device) -> EngineConfig:
        tokens = self.max_num_batched_tokens or default_for(MAX_NUM_BATCHED_TOKENS, device)
        return replace(self, device=str(device), max_num_seqs=self.max_num_seqs or default_for(MAX_NUM_SEQS, device),
                       max_num_batched_tokens=tokens)

    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(self.max_num_seqs, self.max_num_batched_tokens, self.block_size,
                               self.prefix_cache_tokens)


DEFAULT_CPU_KV_MEMORY = 512 * 1024 * 1024


class EngineCore:
    """The model, its paged KV cache and every request in flight, stepped by one thread at a time."""

    def __init__(self, model: PaddleOCRVL, processor: Processor, config: EngineConfig | None = None) -> None:
        self.model, self.processor = model, processor
        self.config = config = (config or EngineConfig()).resolved(model.device)
        bound_onednn_caches(config.onednn_cache_entries)  # before prepack_linears makes the first primitives
        text = model.config.text
        num_blocks = config.num_blocks or PagedKVCache.blocks_for_budget(
            self._kv_memory(), text.num_hidden_layers, config.block_size, text.num_key_value_heads, text.head_dim,
            model.dtype)
        self.scheduler = Scheduler(config.scheduler(), num_blocks, config.enable_prefix_caching)
        self.pool = self.scheduler.kv_cache.pool
        self.encoder_cache = EncoderCache(config.encoder_cache_tokens, self._pending_image_hashes) \
            if config.encoder_cache_tokens > 0 else None
        with serial_torch():  # the thread that builds an engine seldom runs its steps: see serial_torch
            self.cache = PagedKVCache(text.num_hidden_layers, num_blocks, config.block_size,
                                      text.num_key_value_heads, text.head_dim, model.dtype, model.device)
            prepack_linears(model, config.max_num_seqs, LINEARS)
            self.runner = ModelRunner(model, self.cache, self.encoder_cache, config.attention, config.max_num_seqs,
                                      config.cuda_graphs, processor.table)
        self.sequences: dict[str, Sequence] = {}
        self.listeners: dict[str, Callable[[Delta], None]] = {}
        self._ids = itertools.count()
        self._busy_s = 0.0
        self._steps = self._step_sequences = 0  # steps run, and the sequences in them all together
        self._bound_threads: set[int] = set()
        self.clock = PhaseClock(model.device)

    @classmethod
    def from_pretrained(cls, path_or_id: str | Path, **config: object) -> Self:
        engine_config = EngineConfig(**config)
        device = resolve_device(engine_config.device)
        dtype = resolve_dtype(engine_config.dtype, device)
        directory = resolve_checkpoint(path_or_id)
        processor = Processor.from_pretrained(directory)  # first: its files are small, a broken one fails at once
        with serial_torch():
            model = load_model(directory, device, dtype, engine_config.quantization, engine_config.group_size)
        return cls(model, processor, engine_config)

    def _kv_memory(self) -> int:
        if self.config.kv_cache_memory:
            return self.config.kv_cache_memory
        if self.model.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.model.device)
            return int(free * self.config.gpu_memory_fraction)
        return DEFAULT_CPU_KV_MEMORY

    def encode(self, request: Request) -> Prompt:
        if request.messages is not None:
            return self.processor.encode_messages(request.messages)
        return self.processor.encode(request.prompt, request.images)

    def prepare(self, request: Request) -> Sequence:
        """Preprocess a request into a sequence (thread-safe; the expensive part of adding a request)."""
        if request.max_tokens < 1:
            raise EngineError("invalid_request", "max_tokens must be at least 1")
        prompt = self.encode(request)
        self.scheduler.check_fits(len(prompt.input_ids), request.max_tokens)
        image_id = self.model.config.image_token_id
        positions, rope_delta = get_rope_index(prompt.input_ids, prompt.grids, image_id)
        request_id = request.request_id or f"req-{next(self._ids)}"
        detok = IncrementalDetokenizer(self.processor.tokenizer, request.skips_special_tokens, request.stop)
        pixels = list(prompt.patches.split(prompt.patch_counts)) if prompt.grids else []
        hashes = [image_hash(p, grid) for p, grid in zip(pixels, prompt.grids, strict=True)]
        spans = _image_spans(prompt, image_id)
        stops = StopRules(request, self.processor.eos_token_id)
        return Sequence(request_id, request, prompt, positions, rope_delta, spans, pixels, hashes, detok, stops)

    def add_request(self, request: Request | Sequence) -> str:
        seq = request if isinstance(request, Sequence) else self.prepare(request)
        if seq.request_id in self.sequences:
            raise EngineError("duplicate_request", f"request id {seq.request_id} is already in flight")
        self.scheduler.add(seq)
        self.sequences[seq.request_id] = seq
        return seq.request_id

    def abort(self, request_id: str) -> None:
        seq = self.sequences.get(request_id)
        if seq is not None:
            self._finish(seq, "abort")

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[Output]:
        """Run one batch; return the outputs of the requests that finished in it. The time it takes counts as busy
        (stats' busy_ms), so a service can tell how much of its wall time the engine was working."""
        started = time.perf_counter()
        self._bind_cpu_threads()
        try:
            return self._step()
        finally:
            self._busy_s += time.perf_counter() - started

    def _step(self) -> list[Output]:
        clock = self.clock
        step = clock("schedule", self.scheduler.schedule)
        if not step:
            return []
        self._steps += 1
        self._step_sequences += len(step.items)
        batch, tensors = clock("prepare", self.runner.prepare, step)
        logits = clock("forward", self.runner.forward, batch, tensors)
        tokens = clock("sample", sample, logits, batch.sampled)
        return clock("update", self._update, step, batch.sampled, tokens)

    def _update(self, step: Step, seqs: list[Sequence], tokens: list[int]) -> list[Output]:
        self.scheduler.commit(step)
        finished = []
        for seq, token in zip(seqs, tokens, strict=True):
            if self._advance(seq, token):
                finished.append(self._finish(seq, seq.finish_reason))
        return finished

    def generate(self, requests: list[Request]) -> list[Output]:
        """Offline batch: all requests in flight together; outputs in request order.

        Images are preprocessed on a small thread pool first (PIL and numpy release the GIL), so a bad
        request refuses the batch before any of it is queued.
        """
        with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
            sequences = list(pool.map(self.prepare, requests))
        ids = [self.add_request(seq) for seq in sequences]
        done: dict[str, Output] = {}
        while self.has_unfinished():
            done.update((out.request_id, out) for out in self.step())
        return [done[i] for i in ids]

    def _bind_cpu_threads(self) -> None:
        """On a CPU, size and bind the OpenMP pool of each thread that runs steps, once (OpenMP keeps one per thread):
        as many threads as torch is set to, at most one per core this process may use, each on its own core. Then
        make the GEMM primitives of every row count the steps can bring (warm_primitives), at that thread count, so
        a worker's memory does not rise by one each time a request first brings a count."""
        caller = threading.get_ident()
        if self.model.device.type == "cpu" and caller not in self._bound_threads:
            configure_cpu_threads(min(torch.get_num_threads(), len(allowed_cores())))
            warm_primitives(self.model, {self.model.lm_head: self.config.max_num_seqs})
            self._bound_threads.add(caller)

    def stats(self) -> dict[str, int]:
        """Cache and scheduler counters (exported as metrics by the service)."""
        kv_cache, encoder = self.scheduler.kv_cache, self.encoder_cache
        return {
            "blocks_total": self.pool.num_blocks, "blocks_free": self.pool.num_free, "blocks_used": self.pool.num_used,
            "blocks_cached": self.pool.num_cached, "block_evictions": self.pool.evictions,
            "prefix_query_tokens": kv_cache.query_tokens,
            "prefix_hit_tokens": kv_cache.hit_tokens,
            "encoder_cache_hits": encoder.hits if encoder else 0,
            "encoder_cache_misses": encoder.misses if encoder else 0,
            "encoder_cache_evictions": encoder.evictions if encoder else 0,
            "vision_tower_calls": self.runner.tower_calls, "vision_tower_images": self.runner.tower_images,
            "preemptions": self.scheduler.preemptions, "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting), "busy_ms": int(self._busy_s * 1000),
            "steps": self._steps, "step_sequences": self._step_sequences,
            "decode_graph_steps": self.runner.graphs.steps if self.runner.graphs else 0,
            **{f"{phase}_ms": int(seconds * 1000) for phase, seconds in self.clock.seconds.items()}}

    def _pending_image_hashes(self) -> set[str]:
        """Images that running requests have yet to prefill: their encoder-cache entries must stay."""
        return {seq.image_hashes[span.index] for seq in self.scheduler.running for span in seq.spans
                if span.end > seq.num_computed}

    def _advance(self, seq: Sequence, token: int) -> bool:
        """Apply one sampled token; True when the sequence is done (finish_reason set).

        Text is decoded token by token only for a stream or stop strings; otherwise once, when the request ends.
        """
        stops = seq.stops
        if token in stops.token_ids:
            seq.finish_reason = "stop"
            return True
        seq.append(token)
        detokenizer = seq.detokenizer
        if detokenizer.stop or seq.request_id in self.listeners:
            self._notify(seq, Delta(seq.request_id, detokenizer.add(token), [token]))
        else:
            detokenizer.hold(token)
        seq.finish_reason = stops.reason(token, seq.num_output_tokens, detokenizer.stopped)
        return seq.finish_reason is not None

    def _finish(self, seq: Sequence, reason: str) -> Output:
        self.scheduler.finish(seq, reason)
        self.sequences.pop(seq.request_id, None)
        seq.finished_at = time.perf_counter()
        first = seq.first_token_at or seq.finished_at
        out = Output(
            request_id=seq.request_id, text=seq.detokenizer.final_text(), token_ids=seq.output_ids,
            finish_reason=reason, prompt_tokens=seq.num_prompt_tokens, cached_tokens=seq.num_cached,
            ttft_s=first - seq.arrival, tpot_s=(seq.finished_at - first) / max(1, seq.num_output_tokens - 1))
        self._notify(seq, Delta(seq.request_id, seq.detokenizer.remaining_text(), [], reason))
        self.listeners.pop(seq.request_id, None)
        return out

    def _notify(self, seq: Sequence, delta: Delta) -> None:
        listener = self.listeners.get(seq.request_id)
        if listener is None:
            return
        try:
            listener(delta)
        except Exception:  # a caller that went away (closed event loop) loses its stream, not the batch
            self.listeners.pop(seq.request_id, None)

def _image_spans(prompt: Prompt, image_token_id: int) -> list[ImageSpan]:
    spans, i, ids = [], 0, prompt.input_ids
    while i < len(ids):
        if ids[i] == image_token_id:
            j = i
            while j < len(ids) and ids[j] == image_token_id:
                j += 1
            spans.append(ImageSpan(i, j, len(spans)))
            i = j
        else:
            i += 1
    return spans
