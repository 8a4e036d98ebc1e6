"""Stopping: stop tokens and stop strings end a request where they say, the token limit and the runaway-repetition
guard where they apply, and the rules follow the request's own settings."""

from __future__ import annotations

from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
from pipeline.engine.stopping import RunawayGuard, StopRules
from tests.reference import random_image

EOS = 2


def test_eos_stops_unless_ignored_and_the_guard_follows_the_request():
    plain = StopRules(Request(stop_token_ids=[7]), EOS)
    assert plain.token_ids == {7, EOS} and plain.runaway is not None
    fixed_length = StopRules(Request(ignore_eos=True), EOS)
    assert fixed_length.token_ids == frozenset() and fixed_length.runaway is None
    assert StopRules(Request(ignore_eos=True, repetition_guard=True), EOS).runaway is not None


def test_a_stop_string_comes_before_the_limit_and_the_limit_before_a_runaway():
    rules = StopRules(Request(max_tokens=3), EOS)
    assert rules.reason(5, 1, text_stopped=True) == "stop"
    assert rules.reason(5, 2, text_stopped=False) is None
    assert rules.reason(5, 3, text_stopped=False) == "length"


def test_stop_tokens_stop_strings_and_the_repetition_guard(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint)
    base = engine.generate([Request(prompt="OCR:", images=[random_image(70, 50)], max_tokens=12, ignore_eos=True)])[0]
    stop_at = base.token_ids[3]
    stopped = engine.generate([Request(prompt="OCR:", images=[random_image(70, 50)], max_tokens=12,
                                       stop_token_ids=[stop_at], ignore_eos=True)])[0]
    first = base.token_ids.index(stop_at)
    assert stopped.finish_reason == "stop" and stopped.token_ids == base.token_ids[:first]
    cut = base.text[len(base.text) // 2:][:3]
    by_string = engine.generate([Request(prompt="OCR:", images=[random_image(70, 50)], max_tokens=12,
                                         stop=[cut], ignore_eos=True)])[0]
    assert by_string.finish_reason == "stop" and cut not in by_string.text and base.text.startswith(by_string.text)


def is_runaway(tokens: list[int]) -> bool:
    """The guard's verdict after the last of `tokens`, fed one at a time as the engine feeds it."""
    guard = RunawayGuard()
    return [guard.add(token) for token in tokens][-1]


def test_a_long_single_token_run_is_a_runaway_but_a_short_one_is_not():
    assert is_runaway([5, 6] + [7] * 32)
    assert not is_runaway([5, 6] + [7] * 31)


def test_a_repeated_ngram_is_a_runaway():
    assert is_runaway([1, 2, 3] + [10, 11, 12, 13, 14, 15, 16, 17] * 4)
    assert not is_runaway([10, 11, 12, 13, 14, 15, 16, 17] * 3)
    assert not is_runaway(list(range(200)))
