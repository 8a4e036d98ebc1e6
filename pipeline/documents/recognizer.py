"""The recognizer interface: region crops in, raw recognitions out.

This module is the only place `pipeline.documents` touches the engine, so the document pipeline can run on
anything that answers `submit` (a remote engine, a recorded run) and the engine never learns about pages.
`submit` returns a future at once and the futures never fail (an error is a Recognition with `error` set), so
a caller can put every region of many pages in flight together and let the engine batch them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, get_args

from PIL import Image

from pipeline.documents.results import Problem, Usage
from pipeline.engine.images import ImageError, ModelImage
from pipeline.engine.prompts import TASK_PROMPTS, RegionTask
from pipeline.engine.request import EngineError, Output, Request

if TYPE_CHECKING:
    from pipeline.engine.engine import Engine

TASKS: frozenset[str] = frozenset(get_args(RegionTask))


@dataclass(frozen=True)
class RecognitionTask:
    """One region to recognise: its crop (or the crop already cut to the model's grid by a page worker) and the
    task (`ocr`, `table`, `formula`, `chart`, `seal`)."""

    image: Image.Image | ModelImage
    task: str
    tag: str | None = None  # names the engine request (with a unique suffix), so logs and tests can tell whose it is


@dataclass(frozen=True)
class Recognition:
    """The raw output for one region, or the problem that stopped it (`error` is None on success).

    `text` is the model's output before postprocess cleans it for the region's task; `usage` and `error` go into
    the region's output as they are.
    """

    text: str = ""
    finish_reason: str = "error"
    usage: Usage = Usage()
    error: Problem | None = None
    skipped: bool = False  # not attempted: there is no model to recognise with (`error` says why)

    @classmethod
    def failed(cls, code: str, message: str) -> Recognition:
        return cls(error=Problem(code, message or code))

    @classmethod
    def skip(cls, code: str, message: str) -> Recognition:
        return cls(error=Problem(code, message or code), skipped=True)


class Recognizer(Protocol):
    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        """Start recognising one region; the future always resolves to a Recognition, never to an exception."""
        ...

    def cancel(self, future: Future[Recognition]) -> None:
        """Stop the work behind a future from submit (its document was canceled); the future still resolves."""
        ...


def task_prompt(task: str) -> str:
    """The model's prompt for a task name (`table` → `Table Recognition:`)."""
    if task not in TASKS:
        raise ValueError(f"unknown recognition task {task!r}; expected one of {sorted(TASKS)}")
    return TASK_PROMPTS[task]


class EngineRecognizer:
    """A Recognizer on an in-process Engine: each region is one greedy request through the engine's loop, with the
    repetition guard on (Request.guards_repetition), so a looping decode ends long before its task's limit."""

    def __init__(self, engine: Engine, max_tokens: int | Mapping[str, int], cache_salt: str = "") -> None:
        """`max_tokens`: generated tokens at most, one number for every task or per task (engine_settings'
        task_max_tokens)."""
        self.engine = engine
        self.max_tokens = max_tokens if isinstance(max_tokens, Mapping) else dict.fromkeys(TASKS, max_tokens)
        self.cache_salt = cache_salt  # folded into every prefix-cache key, so tenants never share KV blocks

    def request(self, task: RecognitionTask) -> Request:
        """The engine request for a region: its task's prompt over its crop, at most its task's tokens."""
        request_id = f"{task.tag}-{uuid.uuid4().hex[:12]}" if task.tag else None
        return Request(task_prompt(task.task), [task.image], max_tokens=self.max_tokens[task.task],
                       cache_salt=self.cache_salt, request_id=request_id)

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        request = self.request(task)
        result: Future[Recognition] = Future()
        try:
            pending = self.engine.submit(request)  # preprocesses here, in the caller's thread
        except (ImageError, EngineError) as exc:  # a crop the model cannot take (too thin, too long a prompt)
            result.set_result(Recognition.failed(exc.code, str(exc)))
            return result
        result.request_id = pending.request_id  # type: ignore[attr-defined]  # what cancel() aborts
        pending.add_done_callback(lambda done: result.set_result(_recognition(done)))
        return result

    def cancel(self, future: Future[Recognition]) -> None:
        request_id = getattr(future, "request_id", None)
        if request_id is not None:
            self.engine.cancel(request_id)


def _recognition(done: Future[Output]) -> Recognition:
    exc = done.exception()
    if exc is not None:  # the engine failed the step this request was in; its siblings on other steps go on
        return Recognition.failed("recognition_failed", f"{type(exc).__name__}: {exc}")
    out = done.result()
    usage = Usage(prompt_tokens=out.prompt_tokens, generated_tokens=out.generated_tokens,
                  cached_tokens=out.cached_tokens, ttft_ms=out.ttft_s * 1000.0,
                  decode_ms=out.tpot_s * max(0, out.generated_tokens - 1) * 1000.0)
    return Recognition(out.text, out.finish_reason, usage)
