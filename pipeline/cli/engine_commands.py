"""The engine on its own: `quire engine serve` (an OpenAI-compatible server) and `quire recognize` (image files, one
JSON line each)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.common import add_quantization_flag, settings_from_flags
from pipeline.engine.prompts import TASK_PROMPTS
from pipeline.model_loading import load_engine

if TYPE_CHECKING:
    from pipeline.engine.engine import Engine


def add_recognize_parser(commands: argparse._SubParsersAction) -> None:
    recognize = commands.add_parser("recognize", help="recognise image files with a model")
    recognize.add_argument("images", nargs="+", type=Path)
    recognize.add_argument("--model", default=None, help="local directory or hub id")
    recognize.add_argument("--task", default="ocr", choices=list(TASK_PROMPTS))
    recognize.add_argument("--max-tokens", type=int, default=None)
    add_quantization_flag(recognize)


def add_engine_parser(commands: argparse._SubParsersAction) -> None:
    engine = commands.add_parser("engine", help="the inference engine on its own")
    engine_commands = engine.add_subparsers(dest="engine_command", required=True)
    serve = engine_commands.add_parser("serve", help="OpenAI-compatible chat completions server")
    serve.add_argument("--model", default=None, help="local directory or hub id")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", default=None, help="model id clients send (default: --model)")
    serve.add_argument("--max-num-seqs", type=int, default=None,
                       help="requests decoded together at most (default: QUIRE_MAX_NUM_SEQS, else 256 on CUDA, 32 on "
                            "a CPU)")
    serve.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                       help="weights and KV cache dtype (default: QUIRE_DTYPE, auto: bfloat16 on CUDA, else float32)")
    serve.add_argument("--device", default=None,
                       help="auto, cpu, cuda or cuda:N (default: QUIRE_DEVICE, auto: CUDA when torch sees a GPU)")
    add_quantization_flag(serve)


def serve_engine(args: argparse.Namespace) -> int:
    import uvicorn

    from pipeline.engine.entrypoints.openai_server import openai_app

    settings = settings_from_flags(device=args.device, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
                                   quantization=args.quantization)
    model = args.model or settings.model
    engine = load_engine(model, settings)
    app = openai_app(engine, args.served_model_name or str(model), default_max_tokens=settings.max_tokens)
    try:
        uvicorn.run(app, host=args.host, port=args.port)
    finally:
        engine.close()
    return 0


def recognize(args: argparse.Namespace) -> int:
    """`quire recognize`: one JSON line per image; 1 when any input was not an image (documents go to process)."""
    from pipeline.engine_settings import task_max_tokens

    settings = settings_from_flags(quantization=args.quantization)
    started = time.perf_counter()
    engine = load_engine(args.model or settings.model, settings)
    loaded = time.perf_counter()
    max_tokens = task_max_tokens(settings, args.max_tokens)[args.task]
    recognized = [_recognize_one(engine, path, args.task, max_tokens) for path in args.images]
    print(f"load {loaded - started:.2f}s, total {time.perf_counter() - started:.2f}s", file=sys.stderr)
    return 0 if all(recognized) else 1


def _recognize_one(engine: Engine, path: Path, task: str, max_tokens: int) -> bool:
    """Print one image's result (or its error) as a JSON line; False when it was not an image."""
    from pipeline.documents.source import sniff
    from pipeline.engine.images import ImageError
    from pipeline.engine.request import Request

    data = path.read_bytes()
    try:
        if sniff(data) == "application/pdf":
            raise ImageError("not_an_image", "a PDF document, not an image")
        out = engine.generate([Request(TASK_PROMPTS[task], [data], max_tokens=max_tokens)])[0]
    except ImageError as exc:
        print(json.dumps({"image": str(path), "error": exc.code, "message": str(exc)}))
        reason = str(exc).removeprefix(f"{exc.code}: ")
        print(f"error: {path}: {reason}; `quire recognize` takes images (one region or page each), `quire process "
              f"{path}` reads documents (PDF, TIFF, scans) into Markdown and JSON", file=sys.stderr)
        return False
    print(json.dumps({"image": str(path), "text": out.text, "finish_reason": out.finish_reason,
                      "prompt_tokens": out.prompt_tokens, "generated_tokens": out.generated_tokens,
                      "ttft_ms": round(out.ttft_s * 1000, 1), "tpot_ms": round(out.tpot_s * 1000, 2)},
                     ensure_ascii=False))
    return True
