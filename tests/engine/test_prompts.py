"""The model's tasks are named once (prompts.Task) and each has its prompt; a region's tasks are those less spotting."""

from __future__ import annotations

from typing import get_args

from pipeline.documents.recognizer import TASKS
from pipeline.engine.prompts import PROMPT_TASKS, TASK_PROMPTS, RegionTask, Task


def test_every_task_has_its_prompt_and_every_prompt_names_its_task():
    assert set(TASK_PROMPTS) == set(get_args(Task))
    assert all(TASK_PROMPTS[PROMPT_TASKS[prompt]] == prompt for prompt in PROMPT_TASKS)


def test_a_region_is_read_as_any_task_but_spotting():
    assert TASKS == set(get_args(RegionTask)) == set(get_args(Task)) - {"spotting"}
