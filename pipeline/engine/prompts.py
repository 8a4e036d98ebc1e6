"""The model's task prompts: the text of the user turn that selects what PaddleOCR-VL reads a crop as.

A module of its own, without torch, so the document side (region tasks, page workers) names tasks without loading
the engine.
"""

from __future__ import annotations

from typing import Literal

# What a region of a document is read as (the document pipeline's tasks, and a client's choice per upload).
RegionTask = Literal["ocr", "table", "formula", "chart", "seal"]
# What the model can read an image as: a region's task, or spotting (text with its places, for a whole image).
Task = Literal[RegionTask, "spotting"]

TASK_PROMPTS: dict[Task, str] = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
    "spotting": "Spotting:",
    "seal": "Seal Recognition:",
}
PROMPT_TASKS: dict[str, Task] = {prompt: task for task, prompt in TASK_PROMPTS.items()}
