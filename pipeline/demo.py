"""`quire demo` (`make demo`): the main job on a generated sample, with the real model when it is here.

A new user should see what Quire is for in one command, offline: a multi-page PDF becomes Markdown, JSON and page
overlays. Without the real weights the demo writes the tiny random checkpoint and says plainly that the regions the
model reads (the table, the formula) come out as noise, and how to get the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipeline.config import Settings
from pipeline.documents.outputs import DocumentWriter
from pipeline.documents.results import DocumentOutput
from pipeline.documents.sample_pdf import write_sample_pdf
from pipeline.documents.summary import summary_line
from pipeline.documents_api import DocumentProcessor
from pipeline.engine.model.loader import local_checkpoint

MARKDOWN_LINES = 16  # of the result shown on the console
LINE_WIDTH = 100  # longer lines (a random model's noise) are cut there
TINY_MAX_TOKENS = 32  # the random checkpoint never stops by itself: keep its noise short


def run_demo(settings: Settings, checkpoint: Path | None = None, max_tokens: int | None = None,
             say: Callable[[str], None] = print) -> DocumentOutput:
    """Process the sample PDF into `<cache dir>/demo/out` and say what came out; the real model when `settings.model`
    is on this machine, else the tiny random checkpoint (written to `checkpoint` or the cache dir if absent)."""
    real = local_checkpoint(settings.model)
    model = str(real) if real else str(_tiny_checkpoint(checkpoint or settings.tiny_checkpoint))
    tokens = max_tokens or (None if real else TINY_MAX_TOKENS)  # None: the settings' per-task limits
    demo = settings.cache_dir.expanduser() / "demo"
    sample = write_sample_pdf(demo / "sample.pdf")
    writer = DocumentWriter(demo / "out", "sample")
    writer.start()
    with DocumentProcessor(settings.model_copy(update={"model": model}), max_tokens=tokens, workers=0,
                           page_images=True) as processor:
        document = processor.process(sample, on_page=writer.page)
    writer.finish(document)
    _report(document, writer, sample, say)
    if not real:
        say(f"Note: {model} is a tiny RANDOM checkpoint, so the regions the model reads (the table, the formula) "
            f"are noise; the text comes from the PDF's text layer. For real results: `quire models pull` (downloads "
            f"{settings.model}, about 2 GB), then `make demo` again or `quire process your.pdf -o out/`.")
    return document


def _tiny_checkpoint(directory: Path) -> Path:
    from pipeline.samples.tiny_checkpoint import write_tiny_checkpoint

    if not (directory / "model.safetensors").exists():
        write_tiny_checkpoint(directory)
    return directory


def _report(document: DocumentOutput, writer: DocumentWriter, sample: Path, say: Callable[[str], None]) -> None:
    say(f"{sample.name}: {summary_line(document, [writer.markdown_path, writer.json_path])}")
    lines = writer.markdown_path.read_text(encoding="utf-8").splitlines() if writer.markdown_path.exists() else []
    say(f"--- {writer.markdown_path}, its first {min(len(lines), MARKDOWN_LINES)} of {len(lines)} lines:")
    for line in lines[:MARKDOWN_LINES]:
        say(f"    {line[:LINE_WIDTH]}…" if len(line) > LINE_WIDTH else f"    {line}")
    overlays = sorted(writer.pages_dir.glob("*.overlay.png"))
    say(f"--- page overlays (regions boxed and numbered in reading order): {', '.join(map(str, overlays))}")
