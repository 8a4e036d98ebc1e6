"""When a sequence's generation ends: a stop token, a stop string, its token limit, or a runaway loop.

The engine asks once per sampled token: before appending it, whether it is a stop token (which the output leaves
out); after, for the reason to end, if any. Stop strings are found by the detokenizer, which cuts the text at them.
"""

from __future__ import annotations

from collections import deque

from .request import Request


class StopRules:
    """One request's reasons to end, fixed when it is prepared; the runaway guard only where it asks for one."""

    def __init__(self, request: Request, eos_token_id: int) -> None:
        eos = frozenset() if request.ignore_eos else {eos_token_id}
        self.token_ids = frozenset(request.stop_token_ids) | eos
        self.max_tokens = request.max_tokens
        self.runaway = RunawayGuard() if request.guards_repetition else None

    def reason(self, token: int, num_output_tokens: int, text_stopped: bool) -> str | None:
        """Why generation ends now that `token` is appended (the detokenizer having seen it), or None."""
        if text_stopped:
            return "stop"
        if num_output_tokens >= self.max_tokens:
            return "length"
        if self.runaway is not None and self.runaway.add(token):
            return "repetition"
        return None


def repeats_needed(ngram: int) -> int:
    """How often an n-gram must repeat back to back to count as a runaway loop (≥ 32 tokens, ≥ 4 times)."""
    return max(4, -(-32 // ngram))


class RunawayGuard:
    """Whether the tail of the tokens so far is one n-gram (n ≤ max_ngram) repeated back to back, kept up to date
    token by token, in O(max_ngram) a token rather than O(length).

    For each n it counts how many of the latest tokens equal the token n places before them: the tail is an n-gram
    repeated r times back to back exactly when that count reaches n·(r − 1).
    """

    def __init__(self, max_ngram: int = 16) -> None:
        self.recent: deque[int] = deque(maxlen=max_ngram)
        self.matches = [0] * max_ngram
        self.needed = [n * (repeats_needed(n) - 1) for n in range(1, max_ngram + 1)]

    def add(self, token: int) -> bool:
        """Record the next token; True when the tail has become a runaway loop."""
        recent, runaway = self.recent, False
        for i in range(len(self.matches)):
            self.matches[i] = self.matches[i] + 1 if len(recent) > i and recent[-1 - i] == token else 0
            runaway |= self.matches[i] >= self.needed[i]
        recent.append(token)
        return runaway
