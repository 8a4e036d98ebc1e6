"""The engine on a GPU, section by section, in one run that fits a short lease of the machine.

Sections: versions; parity (the fused path on the device against the CPU engine in fp32, and bf16 against
transformers); the vision tower for a page and for 64 crops; the layout model per page at batch 1 and 16; decode
steps at 32/128/256 sequences split into schedule / host prep / forward / sample / update; end-to-end output tok/s
and regions/s on region-crop requests; one profiled decode step (kernel count, CPU and GPU time); int8 and int4
weights against bf16 (tok/s, weight bytes, logit error) on a real-shape checkpoint written there; pages per second
end to end (benchmarks/pages.py at the real shape: the corpus through process_many, with the `pdf` layout and with
the layout model beside the engine; PyMuPDF, pydantic and their kin travel as wheels, docs/operations.md). The real 0.9B
shape is built with random weights on the device (no weights can travel to it). Each section appends one JSON object
to `--out` as soon as it ends, so a run cut short still leaves data. `--device cpu --small` runs every section at
tiny size (the fused attention under Triton's interpreter), which is how the test suite keeps this script working.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.engine_throughput import engine_round, logit_rel_err, workload
from benchmarks.engines import random_model, release
from pipeline.engine.core import EngineConfig
from pipeline.engine.engine import Engine
from pipeline.engine.model.checkpoint_config import ModelConfig
from pipeline.engine.model.quantization import QuantizedLinear, quantized_weight_bytes
from pipeline.engine.processor import Processor
from pipeline.engine.request import Request
from pipeline.samples.sample_image import sample_image
from pipeline.samples.tiny_checkpoint import TinySpec, write_tiny_checkpoint
from tests.transformers_reference import load_model, load_processor

SIDE_KV_CACHE = 1 << 30  # engines beside the shared one: unsized, each would take most of the free device memory


class Bench:
    """What every section shares: the device, the size, a tiny checkpoint (tokenizer, template, parity weights)."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.device = torch.device(args.device)
        self.tmp = tmp
        self.small = args.small
        self.tiny = write_tiny_checkpoint(tmp / "tiny")
        self.shape = write_tiny_checkpoint(tmp / "bench", TinySpec.bench()) if args.small else None
        self.batches = (2, 4, 8) if args.small else (32, 128, 256)
        self.crops = 4 if args.small else 64
        self._engine: Engine | None = None

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def timed_ms(self, work: Callable[[], object]) -> float:
        """Median wall time of `work` over three runs after one warm-up run (which compiles kernels); one run at the
        small size, a smoke run whose times mean nothing."""
        work()
        times = []
        for _ in range(1 if self.small else 3):
            self.sync()
            started = time.perf_counter()
            work()
            self.sync()
            times.append((time.perf_counter() - started) * 1000)
        return round(statistics.median(times), 2)

    def engine(self) -> Engine:
        """The engine at the benchmark's shape (random weights), built once and shared by the later sections."""
        if self._engine is None:
            config = EngineConfig(device=str(self.device), max_num_seqs=max(self.batches),
                                  kv_cache_memory=(64 << 20) if self.small else (16 << 30))
            if self.small:
                self._engine = Engine.from_pretrained(self.shape, **vars(config))
            else:
                self._engine = Engine(random_model(ModelConfig(), self.device, torch.bfloat16),
                                      Processor.from_pretrained(self.tiny), config)
        return self._engine


def versions(bench: Bench) -> dict:
    import transformers

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    gpu = torch.cuda.get_device_name(bench.device) if bench.device.type == "cuda" else None
    return {"torch": torch.__version__, "triton": triton_version, "transformers": transformers.__version__,
            "cuda": torch.version.cuda, "gpu": gpu, "small": bench.small}


def parity(bench: Bench) -> dict:
    """Greedy tokens of the fused path on the device equal the CPU engine's in fp32; bf16 agreement with transformers
    (text-only and image prompts apart: transformers 5.16–5.22 resample the vision position table wrongly)."""
    tokens = 4 if bench.small else 24  # small: a smoke run, each of its steps run by Triton's interpreter
    text = [Request(prompt=f"Question {i}: summarise section {i}.", max_tokens=tokens, ignore_eos=True)
            for i in range(3)]
    images = [Request(prompt="OCR:", images=[sample_image(200 + 60 * i, 60, text=f"crop {i}")], max_tokens=tokens,
                      ignore_eos=True) for i in range(2 if bench.small else 4)]
    requests = text[:1] + images[:1] if bench.small else text + images
    device = Engine.from_pretrained(bench.tiny, device=str(bench.device), dtype="float32", attention="triton",
                                    kv_cache_memory=SIDE_KV_CACHE)
    cpu = Engine.from_pretrained(bench.tiny, device="cpu", dtype="float32", attention="torch")
    ours, reference = device.generate(requests), cpu.generate(requests)
    release(device)
    result = {"fp32_equal_to_cpu": sum(a.token_ids == b.token_ids for a, b in zip(ours, reference, strict=True)),
              "fp32_requests": len(requests)}
    return result | bf16_agreement(bench, text[:1] if bench.small else text, "text") | (
        {} if bench.small else bf16_agreement(bench, images, "image"))


def bf16_agreement(bench: Bench, requests: list[Request], kind: str) -> dict:
    """Share of greedy tokens equal to transformers' in bf16 before the first divergence (bf16 ties differ early)."""
    engine = Engine.from_pretrained(bench.tiny, device=str(bench.device), dtype="bfloat16",
                                    kv_cache_memory=SIDE_KV_CACHE)
    processor = load_processor(bench.tiny)
    model = load_model(bench.tiny, torch.bfloat16).to(bench.device)
    agreed = total = 0
    for request, out in zip(requests, engine.generate(requests), strict=True):
        parts = [{"type": "image", "image": image} for image in request.images] + [
            {"type": "text", "text": request.prompt}]
        inputs = processor.apply_chat_template([{"role": "user", "content": parts}], add_generation_prompt=True,
                                               tokenize=True, return_dict=True, return_tensors="pt").to(bench.device)
        with torch.inference_mode():
            generated = model.generate(**inputs, max_new_tokens=request.max_tokens, do_sample=False,
                                       eos_token_id=None)
        ref = generated[0, inputs["input_ids"].shape[1]:].tolist()
        agreed += next((i for i, (a, b) in enumerate(zip(out.token_ids, ref, strict=False)) if a != b), len(ref))
        total += len(ref)
    release(engine)
    return {f"bf16_{kind}_tokens_agreeing": agreed, f"bf16_{kind}_tokens": total}


def vision(bench: Bench) -> dict:
    """The tower with the attention the engine picked, on one page and on a batch of region crops."""
    engine = bench.engine()
    page = sample_image(413, 585, text="page") if bench.small else sample_image(1654, 2339, text="page")
    crops = [image for image, _ in workload(bench.crops, seed=1)]

    def tower(images: list) -> tuple[Callable[[], object], int]:
        prompts = [engine.processor.encode("OCR:", [image]) for image in images]
        pixels = torch.cat([p.pixel_values for p in prompts])
        grids = [grid for p in prompts for grid in p.grids]
        return (lambda: engine.model.encode_images(pixels, grids, engine.runner.vision_attention),
                sum(t * h * w for t, h, w in grids))

    (run_page, _), (run_crops, patches) = tower([page]), tower(crops)
    return {"page_ms": bench.timed_ms(run_page), f"crops_{bench.crops}_ms": bench.timed_ms(run_crops),
            "crops": bench.crops, "crop_patches": patches, "crops_top_ops": top_ops(bench, run_crops)}


def top_ops(bench: Bench, work: Callable[[], object], count: int = 8) -> dict[str, float]:
    """The ops that took the most device time (CPU time without a GPU) in one run of `work`, in ms: where a
    section's time goes."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bench.device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        work()
        bench.sync()
    key = "self_device_time_total" if bench.device.type == "cuda" else "self_cpu_time_total"
    totals = sorted(prof.key_averages(), key=lambda event: getattr(event, key), reverse=True)[:count]
    return {event.key[:80]: round(getattr(event, key) / 1000, 2) for event in totals}


def layout(bench: Bench) -> dict:
    """The layout model's forward per page (random weights at its real input size; post-processing is host work)."""
    from transformers import PPDocLayoutV2Config, PPDocLayoutV2ForObjectDetection

    from pipeline.documents.tiny_layout import TinyLayoutSpec, _v2_config, real_layout_config

    config = real_layout_config()
    if bench.small:
        config = PPDocLayoutV2Config(**_v2_config(TinyLayoutSpec()))
    model = PPDocLayoutV2ForObjectDetection(config).to(bench.device).eval()
    size = 128 if bench.small else 800
    result = {"input_size": size}
    for batch in (1, 16):
        pixels = torch.rand(batch, 3, size, size, device=bench.device)
        with torch.inference_mode():
            result[f"batch_{batch}_ms_per_page"] = round(bench.timed_ms(lambda p=pixels: model(pixel_values=p))
                                                         / batch, 2)
    return result


def decode(bench: Bench) -> dict:
    """Decode steps with every sequence past its prompt, each phase waited for on the device (clock.sync)."""
    engine = bench.engine()
    prompt = " ".join(f"word{i}" for i in range(30))
    result = {}
    for size in bench.batches:
        ids = [engine.add_request(Request(prompt=prompt, max_tokens=512, ignore_eos=True)) for _ in range(size)]
        while any(engine.sequences[i].num_output_tokens == 0 for i in ids):
            engine.step()
        engine.clock.sync = True
        before, steps = dict(engine.clock.seconds), 10
        for _ in range(steps):
            engine.step()
        engine.clock.sync = False
        phases = {phase: round((engine.clock.seconds[phase] - before[phase]) * 1000 / steps, 3) for phase in before}
        for request_id in ids:
            engine.abort(request_id)
        result[f"seqs_{size}"] = phases | {"step_ms": round(sum(phases.values()), 3),
                                           "tok_s": round(size * 1000 / sum(phases.values()), 1)}
    return result | {"decode_graph_steps": engine.stats()["decode_graph_steps"]}


def end_to_end(bench: Bench) -> dict:
    """Region crops of mixed sizes with fixed output lengths (greedy, EOS ignored), all submitted at once."""
    engine = bench.engine()
    items = workload(4, seed=0, tokens=8) if bench.small else workload(256, seed=0)
    engine.generate([Request(prompt="OCR:", images=[items[0][0]], max_tokens=4, ignore_eos=True)])
    requests = [Request(prompt="OCR:", images=[image], max_tokens=n, ignore_eos=True) for image, n in items]
    bench.sync()
    started = time.perf_counter()
    outputs = engine.generate(requests)
    wall = time.perf_counter() - started
    tokens = sum(len(out.token_ids) for out in outputs)
    stats = engine.stats()
    return {"requests": len(items), "output_tokens": tokens, "wall_s": round(wall, 3),
            "output_tok_s": round(tokens / wall, 1), "regions_per_s": round(len(items) / wall, 2),
            "vision_tower_calls": stats["vision_tower_calls"], "decode_graph_steps": stats["decode_graph_steps"]}


def profile(bench: Bench) -> dict:
    """One decode step at the largest batch, eager and (where captured) replayed from a graph."""
    engine = bench.engine()
    size = max(bench.batches)
    ids = [engine.add_request(Request(prompt="profile", max_tokens=512, ignore_eos=True)) for _ in range(size)]
    while any(engine.sequences[i].num_output_tokens == 0 for i in ids):
        engine.step()
    graphs, result = engine.runner.graphs, {"seqs": size}
    for name, use_graphs in (("eager", False), ("graph", True)):
        if use_graphs and graphs is None:
            continue
        engine.runner.graphs = graphs if use_graphs else None
        result[name] = profiled_step(bench, engine)
    engine.runner.graphs = graphs
    for request_id in ids:
        engine.abort(request_id)
    return result


def profiled_step(bench: Bench, engine: Engine) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bench.device.type == "cuda" else [])
    engine.step()
    bench.sync()
    started = time.perf_counter()
    with torch_profile(activities=activities) as prof:
        engine.step()
        bench.sync()
    wall = time.perf_counter() - started
    events = prof.events()
    kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    device_us = sum(getattr(e, "self_device_time_total", 0) for e in kernels)
    cpu_us = sum(e.self_cpu_time_total for e in events if e.device_type == torch.autograd.DeviceType.CPU)
    return {"wall_ms": round(wall * 1000, 2), "kernels": len(kernels), "gpu_ms": round(device_us / 1000, 2),
            "cpu_ops_ms": round(cpu_us / 1000, 2)}


def quantized(bench: Bench) -> dict:
    """Weight-only int8 and int4 against the bf16 engine on one checkpoint: end-to-end output tok/s on region crops,
    the quantized layers' bytes, and the logit error over the first decode steps (eager: a replayed graph's logits
    cannot be observed)."""
    directory = bench.shape or write_tiny_checkpoint(bench.tmp / "real", TinySpec.real_shapes())
    items = workload(4, seed=2, tokens=8) if bench.small else workload(64, seed=2, tokens=128)
    probe = workload(4, 3, 8)
    reference, result = None, {}
    for variant in ("none", "int8", "int8_dequantized", "int4"):
        method = variant.removesuffix("_dequantized")
        engine = Engine.from_pretrained(directory, device=str(bench.device), dtype="bfloat16", quantization=method,
                                        max_num_seqs=len(items), kv_cache_memory=(64 if bench.small else 4096) << 20)
        if variant != method:  # every call through the dequantized weight instead of the int kernel
            for module in engine.model.modules():
                if isinstance(module, QuantizedLinear):
                    module.kernel = False
        engine_round(engine, items[:2])
        result[variant] = {"tok_s": round(engine_round(engine, items), 1),
                           "weight_bytes": quantized_weight_bytes(engine.model)}
        if reference is None:
            reference = engine
            continue
        graphs = reference.runner.graphs, engine.runner.graphs
        reference.runner.graphs = engine.runner.graphs = None
        result[variant] |= {"logit_rel_err": round(logit_rel_err(reference, engine, probe, 8), 5),
                            "vs_bf16": round(result[variant]["tok_s"] / result["none"]["tok_s"], 3)}
        reference.runner.graphs, engine.runner.graphs = graphs
        release(engine)
    release(reference)
    return result | {"requests": len(items)}


def pages_pdf(bench: Bench) -> dict:
    """benchmarks.pages at the real shape on the device: the corpus through process_many, `pdf` layout."""
    return _pages(bench, "pdf")


def pages_layout_model(bench: Bench) -> dict:
    """The same with the layout model (PP-DocLayoutV2 at its real shape, random weights) beside the engine."""
    return _pages(bench, "pp-doclayout")


def _pages(bench: Bench, layout: str) -> dict:
    from benchmarks import pages

    shape = ["--small", "--no-write"] if bench.small else ["--shape", "real", "--dtype", "bfloat16"]
    args = pages.parser().parse_args([*shape, "--device", str(bench.device), "--layout", layout])
    folder = bench.tmp / f"pages-{layout}"
    folder.mkdir()
    return pages.measure(args, folder)


SECTIONS: dict[str, Callable[[Bench], dict]] = {
    "versions": versions, "parity": parity, "vision": vision, "layout": layout, "decode": decode,
    "end_to_end": end_to_end, "profile": profile, "quantized": quantized, "pages": pages_pdf,
    "pages_layout_model": pages_layout_model}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny shapes: a smoke run of every section")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, one per section, appended")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset, in this order")
    args = parser.parse_args(argv)
    if args.device == "cpu":  # the fused attention then runs under Triton's interpreter, read when kernels load
        os.environ.setdefault("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args, Path(tmp))
        for name in args.sections.split(","):
            started = time.perf_counter()
            try:
                record = SECTIONS[name](bench)
            except Exception as exc:  # one broken section must not cost the others' figures
                record, failed = {"error": f"{type(exc).__name__}: {exc}",
                                  "where": traceback.format_exc().splitlines()[-7:-1]}, failed + 1
            record = {"section": name, **record, "seconds": round(time.perf_counter() - started, 2)}
            with args.out.open("a") as out:
                out.write(json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
