"""What the commands share: a flag or two, the settings with the given flags in place of their QUIRE_* variables,
and how to say that the model is missing (with the demo's tiny checkpoint to try instead)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pipeline.config import get_settings

if TYPE_CHECKING:
    from pipeline.config import Settings

# what to run on the demo's tiny checkpoint instead, per command, when the model is not available
DEMO_COMMANDS = {"serve": "QUIRE_MODEL={tiny} quire serve", "recognize": "quire recognize IMAGE --model {tiny}",
                  "engine": "quire engine serve --model {tiny}"}


def add_quantization_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quantization", default=None, choices=["none", "int8", "int4"],
                        help="the decoder's and head's weights, quantized as they load (default: QUIRE_QUANTIZATION "
                             "or none; a checkpoint from `quire models quantize` loads in its own)")


def settings_from_flags(**flags: object) -> Settings:
    """The settings, with each command-line flag that was given (not None) in place of its QUIRE_* variable."""
    return get_settings().model_copy(update={key: value for key, value in flags.items() if value is not None})


def say_model_missing(exc: Exception, command: str) -> None:
    """The loader's message, and how to try `command` on the demo's tiny checkpoint instead of real weights."""
    print(f"error: {exc}{demo_hint(command)}", file=sys.stderr)


def demo_hint(command: str) -> str:
    tiny = get_settings().tiny_checkpoint
    return (f"\nTo try Quire without the real weights: `quire demo` writes a tiny random checkpoint to {tiny}; then "
            f"`{command.format(tiny=tiny)}` (its text is not meaningful).")
