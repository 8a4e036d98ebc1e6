"""The model's task prompts: the text of the user turn that selects what PaddleOCR-VL reads a crop as.

A module of its own, without torch, so the document side (region tasks, page workers) names tasks without loading
the engine.
"""

from __future__ import annotations

TASK_PROMPTS = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
    "spotting": "Spotting:",
    "seal": "Seal Recognition:",
}
PROMPT_TASKS = {prompt: task for task, prompt in TASK_PROMPTS.items()}
