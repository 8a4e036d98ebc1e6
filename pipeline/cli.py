"""The `quire` command."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .config import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quire", description="Document OCR on PaddleOCR-VL")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="recognise a sample image with a tiny random checkpoint")
    demo.add_argument("--checkpoint", type=Path, help="where to write the tiny checkpoint (default: cache dir)")
    demo.add_argument("--max-tokens", type=int, default=32)
    recognize = commands.add_parser("recognize", help="recognise image files with a model")
    recognize.add_argument("images", nargs="+", type=Path)
    recognize.add_argument("--model", default=None, help="local directory or hub id")
    recognize.add_argument("--task", default="ocr", choices=["ocr", "table", "formula", "chart", "spotting", "seal"])
    recognize.add_argument("--max-tokens", type=int, default=None)
    engine = commands.add_parser("engine", help="the inference engine on its own")
    engine_commands = engine.add_subparsers(dest="engine_command", required=True)
    serve = engine_commands.add_parser("serve", help="OpenAI-compatible chat completions server")
    serve.add_argument("--model", default=None, help="local directory or hub id")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", default=None, help="model id clients send (default: --model)")
    serve.add_argument("--max-num-seqs", type=int, default=32, help="requests decoded together at most")
    serve.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                       help="weights and KV cache dtype (default: QUIRE_DTYPE)")
    serve.add_argument("--device", default=None, help="torch device such as cpu or cuda (default: QUIRE_DEVICE)")
    args = parser.parse_args(argv)
    return {"demo": _demo, "recognize": _recognize, "engine": _serve_engine}[args.command](args)


def _serve_engine(args: argparse.Namespace) -> int:
    import uvicorn

    from .engine.engine import Engine
    from .engine.model.loader import CheckpointError
    from .engine.server import create_app

    settings = get_settings()
    model = args.model or settings.model
    try:
        engine = Engine.from_pretrained(model, device=args.device or settings.device,
                                        dtype=args.dtype or settings.dtype, max_num_seqs=args.max_num_seqs)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app = create_app(engine, args.served_model_name or str(model), default_max_tokens=settings.max_tokens)
    try:
        uvicorn.run(app, host=args.host, port=args.port)
    finally:
        engine.close()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .engine.sample import sample_image
    from .engine.tiny_checkpoint import write_tiny_checkpoint

    directory = args.checkpoint or get_settings().cache_dir / "tiny-checkpoint"
    if not (directory / "model.safetensors").exists():
        write_tiny_checkpoint(directory)
    image_path = directory.parent / "sample.png"
    sample_image().save(image_path)
    print(f"tiny random checkpoint: {directory}  (random weights: the text is not meaningful)")
    return _recognize(argparse.Namespace(images=[image_path], model=str(directory), task="ocr",
                                         max_tokens=args.max_tokens))


def _recognize(args: argparse.Namespace) -> int:
    from .engine.engine import Engine
    from .engine.model.loader import CheckpointError
    from .engine.processor import TASK_PROMPTS, ImageError
    from .engine.request import Request

    settings = get_settings()
    started = time.perf_counter()
    try:
        engine = Engine.from_pretrained(args.model or settings.model, device=settings.device, dtype=settings.dtype)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    loaded = time.perf_counter()
    max_tokens = args.max_tokens or settings.max_tokens
    for path in args.images:
        request = Request(TASK_PROMPTS[args.task], [path.read_bytes()], max_tokens=max_tokens)
        try:
            out = engine.generate([request])[0]
        except ImageError as exc:
            print(json.dumps({"image": str(path), "error": exc.code, "message": str(exc)}))
            continue
        print(json.dumps({"image": str(path), "text": out.text, "finish_reason": out.finish_reason,
                          "prompt_tokens": out.prompt_tokens, "generated_tokens": out.generated_tokens,
                          "ttft_ms": round(out.ttft_s * 1000, 1), "tpot_ms": round(out.tpot_s * 1000, 2)},
                         ensure_ascii=False))
    print(f"load {loaded - started:.2f}s, total {time.perf_counter() - started:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
