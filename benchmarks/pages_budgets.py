"""Realistic work for random weights: each region generates as many tokens as its own text layer holds.

A random model never says anything sensible and seldom stops, so a benchmark on one would measure whatever length
its noise happens to take. Here each region is given the token count of the text the PDF prints inside it (in the
checkpoint's tokenizer, at least MIN_BUDGET), EOS ignored, so a page costs the engine what a real page costs; a
region with no text layer (a scan, a picture of text) takes a fixed budget. The budgets are found before the run
(every page laid out once, untimed) and looked up by the tag the stream gives each region's request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymupdf

from pipeline.documents.errors import DocumentError
from pipeline.documents.layout import LayoutBackend
from pipeline.documents.process import LaidOutPage, ProcessOptions, lay_out
from pipeline.documents.recognizer import EngineRecognizer, RecognitionTask, task_prompt
from pipeline.documents.source import SourcePage, ingest
from pipeline.documents.stream import region_tag
from pipeline.engine.request import Request

MIN_BUDGET = 8


def region_budgets(paths: list[Path], layout: LayoutBackend, options: ProcessOptions, tokenizer: Any,
                   fixed: int) -> dict[str, int]:
    """The token budget of every region that could go to the model, by its request tag."""
    budgets: dict[str, int] = {}
    for path in paths:
        try:
            document = ingest(path.read_bytes(), options.limits, options.password)
        except DocumentError:
            continue
        with document:
            for source in document.pages():
                laid_out = lay_out(source, layout, options.regions)
                if isinstance(laid_out, LaidOutPage):
                    budgets.update(_page_budgets(path.name, source, laid_out, tokenizer, fixed))
    return budgets


def _page_budgets(name: str, source: SourcePage, laid_out: LaidOutPage, tokenizer: Any,
                  fixed: int) -> dict[str, int]:
    pdf_page = source.load() if source.document.is_pdf else None
    budgets = {}
    for item in laid_out.prepared:
        if item.task is None or item.crop_box is None:
            continue
        text = ""
        if isinstance(pdf_page, pymupdf.Page):
            text = pdf_page.get_text("text", clip=pymupdf.Rect(laid_out.page.to_points(item.region.bbox))).strip()
        tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0
        budgets[region_tag(name, source.index, item.region.order)] = max(MIN_BUDGET, tokens) if text else fixed
    return budgets


class BudgetedRecognizer(EngineRecognizer):
    """The engine's recognizer with each region's budget, EOS ignored; keeps every request for the replay."""

    def __init__(self, engine: Any, budgets: dict[str, int], fixed: int) -> None:
        super().__init__(engine, fixed)
        self.budgets, self.fixed = budgets, fixed
        self.requests: list[Request] = []

    def request(self, task: RecognitionTask) -> Request:
        request = Request(task_prompt(task.task), [task.image], max_tokens=self.budgets.get(task.tag, self.fixed),
                          ignore_eos=True)
        self.requests.append(request)
        return request
