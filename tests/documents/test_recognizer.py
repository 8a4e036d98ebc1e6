"""Regions are recognised under their task's token limit (8192 by default), and a decode that loops still ends early."""

from __future__ import annotations

import pytest

from pipeline.config import Settings
from pipeline.documents.recognizer import EngineRecognizer, RecognitionTask
from pipeline.engine import core
from pipeline.engine.engine import Engine
from pipeline.engine_settings import task_max_tokens
from tests.reference import random_image

LOOP = [85627, 55566, 50397]  # what a real model stuck on a degenerate crop does: one n-gram over and over


@pytest.fixture
def looping_engine(tiny_checkpoint, monkeypatch: pytest.MonkeyPatch):
    """The tiny checkpoint's engine, its sampler replaced by one that repeats LOOP for every sequence."""
    monkeypatch.setattr(core, "sample",
                        lambda logits, seqs: [LOOP[seq.num_output_tokens % len(LOOP)] for seq in seqs])
    engine = Engine.from_pretrained(tiny_checkpoint)
    yield engine
    engine.close()


@pytest.mark.parametrize("task", ["ocr", "table"])
def test_a_runaway_decode_ends_by_the_repetition_guard_long_before_the_limit(looping_engine, task):
    limits = task_max_tokens(Settings(max_tokens=8192))
    recognizer = EngineRecognizer(looping_engine, limits)
    result = recognizer.submit(RecognitionTask(random_image(100, 60, seed=3), task)).result(timeout=120)
    assert limits[task] == 8192
    assert result.finish_reason == "repetition" and result.usage.generated_tokens < 64


def test_each_task_is_recognised_under_its_own_limit(looping_engine):
    recognizer = EngineRecognizer(looping_engine, {"ocr": 8192, "formula": 5})
    result = recognizer.submit(RecognitionTask(random_image(100, 60, seed=3), "formula")).result(timeout=120)
    assert (result.finish_reason, result.usage.generated_tokens) == ("length", 5)
