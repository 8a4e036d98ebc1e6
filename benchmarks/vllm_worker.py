"""Runs throughput rounds through vLLM's offline engine; meant for vLLM's own interpreter.

vLLM pins its own torch and transformers, so it never shares Quire's venv: engine_throughput.py starts this file
with `--vllm-python`, once, and sends it one round of jobs per stdin line, so its start-up (torch.compile, a
profiling run: minutes at the real shape) is paid once while the rounds interleave with Quire's. Each round's
reply is one JSON line; only the generate call is timed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

MAX_MODEL_LEN = 8192  # the real config's 131072 would not fit its 2 GiB KV cache; a region needs far less
TEMPLATE = "<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>{prompt}\nAssistant:\n"


def start(spec: dict):
    cache = tempfile.mkdtemp(prefix="vllm-cache-")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{spec['threads'] - 1}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_CACHE_ROOT", cache)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
    from vllm import LLM

    return LLM(model=spec["model"], dtype=spec["dtype"], trust_remote_code=False, max_num_seqs=spec["max_num_seqs"],
               max_model_len=MAX_MODEL_LEN, limit_mm_per_prompt={"image": {"count": 1, "width": 600, "height": 200}})


def run_round(llm, prompt: str, jobs: list[dict]) -> dict:
    from PIL import Image
    from vllm import SamplingParams

    inputs = [{"prompt": prompt, "multi_modal_data": {"image": Image.open(job["image"]).convert("RGB")}}
              for job in jobs]
    params = [SamplingParams(max_tokens=job["max_tokens"], ignore_eos=True, temperature=0) for job in jobs]
    started = time.perf_counter()
    outputs = llm.generate(inputs, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"tok_s": tokens / elapsed, "tokens": tokens, "prompt_tokens": sum(len(o.prompt_token_ids) for o in outputs)}


def main(spec_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    llm = start(spec)
    prompt = TEMPLATE.format(prompt=spec["prompt"])
    run_round(llm, prompt, spec["warmup"])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(run_round(llm, prompt, json.loads(line))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
