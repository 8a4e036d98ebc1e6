"""Turn a recognizer's raw output for one region into the content a reader wants.

The model's output is not always clean: a decode can loop on one phrase until the engine's repetition guard or
max_tokens stops it, a formula comes wrapped in whichever delimiters the training data used, and a table comes
as OTSL tags. Each fix here is small and never raises, so a strange output degrades one region, not a page.
"""

from __future__ import annotations

from pipeline.documents.otsl import otsl_to_html
from pipeline.documents.results import RegionContent

# (copies, characters) a repeated tail needs to count as a runaway: after a decode that ended by itself, and
# after one that was cut off (by the engine's repetition guard or max_tokens), which already hints at a loop.
RUNAWAY = (4, 64)
RUNAWAY_CUT_OFF = (3, 24)
MAX_PERIOD = 256  # longest repeated unit looked for, in characters
_CUT_OFF = frozenset({"repetition", "length"})

# Outer formula delimiters, longest first so `$$` is not read as two `$`.
_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))


def postprocess(task: str, text: str, finish_reason: str = "stop") -> RegionContent:
    """Clean one region's output for its task (`ocr`, `table`, `formula`, `chart`, `seal`): `text` always (plain or
    the source markup), `html` for tables, `latex` for formulas."""
    cut_off = finish_reason in _CUT_OFF
    if task == "table" and not cut_off:  # identical empty rows at a table's end are real, not a loop
        return RegionContent(text, html=otsl_to_html(text), finish_reason=finish_reason)
    text, truncated = truncate_repetition(text, cut_off)
    if task == "table":
        return RegionContent(text, html=otsl_to_html(text), finish_reason=finish_reason, truncated=truncated)
    if task == "formula":
        latex = normalize_formula(text)
        return RegionContent(latex, latex=latex, finish_reason=finish_reason, truncated=truncated)
    return RegionContent(text, finish_reason=finish_reason, truncated=truncated)


def truncate_repetition(text: str, cut_off: bool = False) -> tuple[str, bool]:
    """Keep one copy of a unit the text ends by repeating; (text, whether it was cut).

    `cut_off` says the decode was stopped (by the repetition guard or max_tokens), which lowers the bar from
    RUNAWAY to RUNAWAY_CUT_OFF; both leave short legitimate repeats ("...", "!!", a word said twice) alone.
    The shortest repeating unit wins, and the tail may end partway through a copy (max_tokens cuts anywhere);
    that partial copy goes too.
    """
    min_copies, min_chars = RUNAWAY_CUT_OFF if cut_off else RUNAWAY
    stripped = text.rstrip()
    for period in range(1, min(MAX_PERIOD, len(stripped) // 2) + 1):
        start = _periodic_tail_start(stripped, period)
        run = len(stripped) - start
        if run >= min_copies * period and run >= min_chars:
            return stripped[: start + period].rstrip(), True
    return text, False


def _periodic_tail_start(text: str, period: int) -> int:
    """Where the longest tail with text[i] == text[i + period] throughout begins (its first copy starts here)."""
    i = len(text) - 1
    while i - period >= 0 and text[i] == text[i - period]:
        i -= 1
    return i + 1 - period


def normalize_formula(text: str) -> str:
    """LaTeX without outer delimiters (`$$…$$`, `\\[…\\]`, `\\(…\\)`, `$…$`), stripped; nested wraps all go."""
    latex = text.strip()
    while True:
        for opening, closing in _DELIMITERS:
            inner = latex[len(opening) : -len(closing)]
            if (
                len(latex) >= len(opening) + len(closing)
                and latex.startswith(opening)
                and latex.endswith(closing)
                and not latex.endswith("\\" + closing)
                and _wraps_whole(inner, opening)
            ):
                latex = inner.strip()
                break
        else:
            return latex


def _wraps_whole(inner: str, opening: str) -> bool:
    """The delimiters enclose one formula, not two (`$a$ and $b$` starts and ends with `$` but is not one)."""
    if opening in ("$", "$$"):
        return "$" not in inner.replace("\\$", "")
    closing = {"\\[": "\\]", "\\(": "\\)"}[opening]
    return closing not in inner
