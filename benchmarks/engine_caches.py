"""What the engine's caches buy, measured side by side in one run on one checkpoint.

1. Time to first token of a repeated page, prefix cache on vs off (the encoder cache off in both, so
   only KV reuse is measured).
2. End-to-end time of a preemption-heavy mixed workload, encoder cache on vs off (prefix cache off in
   both, so a preempted request must re-prefill through its images). As in bulk archives, crops repeat:
   each distinct crop is asked with three task prompts.
3. 20 concurrent mixed-size crops served together vs one at a time: together must never be slower.

The checkpoint has a heavier vision tower than the tiny test one because at the real size the tower
dominates prefill. Last line: one JSON object with the three ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch

from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
from pipeline.samples.sample_image import sample_image
from pipeline.samples.tiny_checkpoint import TinySpec, write_tiny_checkpoint

SPEC = TinySpec(text_hidden=256, text_layers=4, text_heads=4, text_kv_heads=2, text_head_dim=128,
                text_intermediate=512, vision_hidden=256, vision_layers=6, vision_heads=4, vision_intermediate=1024)


def crop(width: int, height: int, seed: int):
    return sample_image(width, height, text=f"region {seed}")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def prefix_ttft(directory: Path) -> tuple[float, float]:
    page = crop(1000, 800, seed=0)

    def second_ttft(prefix: bool) -> float:
        engine = Engine.from_pretrained(directory, enable_prefix_caching=prefix, encoder_cache_tokens=0)
        request = Request(images=[page], max_tokens=1, ignore_eos=True)
        engine.generate([request])
        return engine.generate([request])[0].ttft_s

    return second_ttft(False), second_ttft(True)


def encoder_cache_run(directory: Path, requests: list[Request], encoder: bool) -> tuple[float, dict]:
    engine = Engine.from_pretrained(directory, block_size=16, num_blocks=96, max_num_seqs=16,
                                    max_num_batched_tokens=1024, enable_prefix_caching=False,
                                    encoder_cache_tokens=65536 if encoder else 0)
    seconds = timed(lambda: engine.generate(requests))
    return seconds, engine.stats()


def repeated_crops(distinct: int, seed: int, max_tokens: int) -> list[Request]:
    rng = random.Random(seed)
    images = [crop(rng.randint(300, 900), rng.randint(200, 700), seed=i) for i in range(distinct)]
    return [Request(prompt=prompt, images=[image], max_tokens=max_tokens, ignore_eos=True)
            for prompt in ("OCR:", "Table Recognition:", "Formula Recognition:") for image in images]


def mixed_crops(count: int, seed: int, max_tokens: int) -> list[Request]:
    rng = random.Random(seed)
    return [Request(images=[crop(rng.randint(100, 900), rng.randint(30, 700), seed=i)],
                    max_tokens=max_tokens, ignore_eos=True) for i in range(count)]


def together_vs_one_by_one(directory: Path, requests: list[Request]) -> tuple[float, float]:
    engine = Engine.from_pretrained(directory, max_num_seqs=32)
    engine.generate(requests[:1])
    fresh = Engine.from_pretrained(directory, max_num_seqs=32)
    fresh.generate(requests[:1])
    one_by_one = timed(lambda: [engine.generate([r]) for r in requests])
    together = timed(lambda: fresh.generate(requests))
    return one_by_one, together


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_tiny_checkpoint(Path(tmp) / "ckpt", SPEC)
        ttft_off, ttft_on = prefix_ttft(directory)
        print(f"repeated page TTFT: prefix cache off {ttft_off * 1000:.1f} ms, on {ttft_on * 1000:.1f} ms")
        workload = repeated_crops(8, args.seed, max_tokens=24)
        off_s, off_stats = encoder_cache_run(directory, workload, encoder=False)
        on_s, on_stats = encoder_cache_run(directory, workload, encoder=True)
        print(f"preemption-heavy workload: encoder cache off {off_s:.2f} s ({off_stats['vision_tower_images']} "
              f"images encoded, {off_stats['preemptions']} preemptions), on {on_s:.2f} s "
              f"({on_stats['vision_tower_images']} encoded, {on_stats['preemptions']} preemptions)")
        crops = mixed_crops(20, args.seed + 1, max_tokens=32)
        one_by_one, together = together_vs_one_by_one(directory, crops)
        print(f"20 mixed-size crops: one by one {one_by_one:.2f} s, together {together:.2f} s")
    print(json.dumps({
        "prefix_ttft_speedup": round(ttft_off / ttft_on, 2),
        "encoder_cache_speedup": round(off_s / on_s, 2),
        "together_vs_one_by_one": round(one_by_one / together, 2),
        "threads": args.threads,
    }))


if __name__ == "__main__":
    main()
