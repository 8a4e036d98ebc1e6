"""Sampling filters and the runaway-repetition guard."""

from __future__ import annotations

import torch

from pipeline.engine.sampling import RunawayGuard, filtered_probs


def test_top_k_keeps_only_the_k_most_likely_tokens():
    probs = filtered_probs(torch.tensor([1.0, 3.0, 2.0, 0.5]), temperature=1.0, top_k=2, top_p=1.0)
    assert probs[[0, 3]].sum() == 0 and torch.isclose(probs.sum(), torch.tensor(1.0))


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = filtered_probs(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), temperature=1.0, top_k=0, top_p=0.7)
    assert probs[2:].sum() == 0 and probs[0] > probs[1] > 0


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
