"""`quire demo`: a generated sample PDF through the document pipeline, on the real model if it is here, else on a
tiny random checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.config import get_settings


def add_demo_parser(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="a sample PDF to Markdown, JSON and overlays (the real model if it is "
                                            "here, else a tiny random checkpoint)")
    demo.add_argument("--checkpoint", type=Path, help="where to write the tiny checkpoint (default: cache dir)")
    demo.add_argument("--max-tokens", type=int, default=None,
                      help="per region (default: 32 on the tiny checkpoint, the per-task limits on the real model)")


def demo(args: argparse.Namespace) -> int:
    """`quire demo`: a generated sample PDF through the document pipeline; 0 when it succeeded."""
    from pipeline.demo import run_demo

    document = run_demo(get_settings(), args.checkpoint, args.max_tokens)
    return 0 if document.status == "succeeded" else 1
