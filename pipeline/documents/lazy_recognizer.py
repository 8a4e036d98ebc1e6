"""A recognizer that loads its model only when a region needs one, and skips regions when there is none.

Born-digital documents are often served whole by their text layer; loading a 0.9B model (or failing for want of
one) for them wastes the user's time or stops them for nothing. So the model is loaded on the first region that
needs it, and when it cannot be (none was asked for, or it is not on this machine), each such region comes back
skipped with the reason, and the rest of the document is still done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from pipeline.documents.recognize import Recognition, RecognitionTask, Recognizer


class ModelUnavailable(Exception):
    """There is no model to recognise with: `code` is `model_none` (none asked for), or the loader's (e.g.
    `model_unavailable`: not on this machine; `bad_checkpoint`: there but broken)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class LazyRecognizer:
    """A Recognizer on whatever `load` returns, called once, on the first submit; `load` raises ModelUnavailable
    when there is no model, and every region is then skipped with its code and message."""

    def __init__(self, load: Callable[[], Recognizer]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._recognizer: Recognizer | None = None
        self.unavailable: ModelUnavailable | None = None

    @property
    def loaded(self) -> bool:
        return self._recognizer is not None

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        recognizer = self._loaded()
        if not isinstance(recognizer, ModelUnavailable):
            return recognizer.submit(task)
        skipped: Future[Recognition] = Future()
        skipped.set_result(Recognition.skip(recognizer.code, str(recognizer)))
        return skipped

    def cancel(self, future: Future[Recognition]) -> None:
        if self._recognizer is not None:
            self._recognizer.cancel(future)

    def _loaded(self) -> Recognizer | ModelUnavailable:
        with self._lock:
            if self._recognizer is None and self.unavailable is None:
                try:
                    self._recognizer = self._load()
                except ModelUnavailable as exc:
                    self.unavailable = exc
            return self._recognizer or self.unavailable  # type: ignore[return-value]  # one of them is set
