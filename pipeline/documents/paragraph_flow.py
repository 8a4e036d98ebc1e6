"""Where one text block runs on into the next: a paragraph cut by a column break.

A paragraph that runs from the foot of one column to the head of the next is two text regions, read one after the
other. The words tell that they are one paragraph: no sentence ends before the break and the text after it starts
in lower case. Such blocks are joined in the Markdown, as a hyphen at a line's end joins a word.
"""

from __future__ import annotations

_CLOSING = "\"'”’»)]"  # after a sentence's end: `(as shown.)`, `“so.”`
_SENTENCE_END = ".!?:;…"


def runs_on(before: str, after: str) -> bool:
    """Whether the text block `after` continues the sentence `before` left unfinished."""
    return before.rstrip().rstrip(_CLOSING)[-1:] not in _SENTENCE_END and after.lstrip()[:1].islower()


def run_on(before: str, after: str) -> str:
    """The two blocks as one paragraph: a line break between them, or the word a hyphen cut joined again."""
    before, after = before.rstrip(), after.lstrip()
    if before.endswith("-") and before[-2:-1].isalpha():
        return before[:-1] + after
    return f"{before}\n{after}"
