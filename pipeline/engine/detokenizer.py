"""Incremental detokenization for streaming: emits only text that can no longer change.

Decoding token by token breaks multi-byte characters and leading-space rules, so each step decodes a
short window behind the read point and emits the difference once it no longer ends in a partial
character. OTSL tags are ordinary tokens and survive; LOC tags survive when special tokens are kept.
"""

from __future__ import annotations

from typing import Any

_PARTIAL = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, skip_special_tokens: bool, stop: list[str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = [s for s in stop or [] if s]
        self.ids: list[int] = []
        self.text = ""
        self.prefix_offset = 0
        self.read_offset = 0
        self.stopped = False

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def add(self, token: int) -> str:
        """Feed one generated token; return the newly final text (cut at a stop string, if one appeared)."""
        self.ids.append(token)
        prefix = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        if len(full) <= len(prefix) or full.endswith(_PARTIAL):
            return ""
        delta = full[len(prefix):]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return self._emit(delta)

    def hold(self, token: int) -> None:
        """Record a token without decoding: nobody reads the text before `final_text`."""
        self.ids.append(token)

    def _emit(self, delta: str) -> str:
        tail_from = max(0, len(self.text) - max((len(s) for s in self.stop), default=0))
        combined = self.text + delta
        hits = [i for s in self.stop if (i := combined.find(s, tail_from)) >= 0]
        if hits:
            cut = min(hits)
            self.stopped = True
            delta = combined[len(self.text):cut] if cut >= len(self.text) else ""
            self.text = combined[:cut]
            return delta
        self.text = combined
        return delta

    def final_text(self) -> str:
        return self.text if self.stopped else self._decode(self.ids)

    def remaining_text(self) -> str:
        """What `final_text` holds beyond the text already emitted (a held-back partial character)."""
        final = self.final_text()
        return final[len(self.text):] if final.startswith(self.text) else ""
