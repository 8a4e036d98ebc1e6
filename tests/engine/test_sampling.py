"""Sampling filters: top-k and top-p."""

from __future__ import annotations

import torch

from pipeline.engine.sampling import filtered_probs


def test_top_k_keeps_only_the_k_most_likely_tokens():
    probs = filtered_probs(torch.tensor([1.0, 3.0, 2.0, 0.5]), temperature=1.0, top_k=2, top_p=1.0)
    assert probs[[0, 3]].sum() == 0 and torch.isclose(probs.sum(), torch.tensor(1.0))


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = filtered_probs(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), temperature=1.0, top_k=0, top_p=0.7)
    assert probs[2:].sum() == 0 and probs[0] > probs[1] > 0
