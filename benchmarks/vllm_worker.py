"""Runs the throughput workload through vLLM's offline engine; meant for vLLM's own interpreter.

vLLM pins its own torch and transformers, so it never shares Quire's venv: engine_throughput.py starts
this file with `--vllm-python` and reads the JSON line it prints. Only the generate call is timed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

TEMPLATE = "<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>{prompt}\nAssistant:\n"


def main(spec_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    cache = tempfile.mkdtemp(prefix="vllm-cache-")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_CACHE_ROOT", cache)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
    from PIL import Image
    from vllm import LLM, SamplingParams

    llm = LLM(model=spec["model"], dtype=spec["dtype"], trust_remote_code=False, max_num_seqs=spec["max_num_seqs"],
              limit_mm_per_prompt={"image": {"count": 1, "width": 600, "height": 200}})
    prompt = TEMPLATE.format(prompt=spec["prompt"])
    inputs = [{"prompt": prompt, "multi_modal_data": {"image": Image.open(job["image"]).convert("RGB")}}
              for job in spec["jobs"]]
    params = [SamplingParams(max_tokens=job["max_tokens"], ignore_eos=True, temperature=0) for job in spec["jobs"]]
    llm.generate(inputs[:1], params[:1])
    start = time.perf_counter()
    outputs = llm.generate(inputs, params)
    elapsed = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(json.dumps({"tok_s": tokens / elapsed, "tokens": tokens}))


if __name__ == "__main__":
    main(sys.argv[1])
