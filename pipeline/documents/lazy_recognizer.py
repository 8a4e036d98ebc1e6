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

from pipeline.documents.recognizer import Recognition, RecognitionTask, Recognizer

NO_MODEL = "none"  # `--model none`, QUIRE_MODEL=none, model="none": no recognition model; its regions are skipped
# The codes of "there is no model", as opposed to one that is there but broken: a run goes on without it, its
# regions skipped (quire process exits 3, the service stays ready); a broken one is an error (exit 2, /readyz 503).
ABSENT = ("model_none", "model_unavailable")


class ModelUnavailable(Exception):
    """There is no model to recognise with: `code` is `model_none` (none asked for), or the loader's (e.g.
    `model_unavailable`: not on this machine; `bad_checkpoint`: there but broken)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def none_asked_for(cls) -> ModelUnavailable:
        return cls("model_none", "no recognition model was asked for (model none)")


class SkippingRecognizer:
    """A Recognizer for want of a model: every region comes back skipped with the reason's code and message."""

    def __init__(self, unavailable: ModelUnavailable) -> None:
        self.unavailable = unavailable

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        skipped: Future[Recognition] = Future()
        skipped.set_result(Recognition.skip(self.unavailable.code, str(self.unavailable)))
        return skipped

    def cancel(self, future: Future[Recognition]) -> None:
        """Nothing runs behind a skipped region's future."""


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
        return self._recognizer is not None and self.unavailable is None

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        return self._loaded().submit(task)

    def cancel(self, future: Future[Recognition]) -> None:
        if self._recognizer is not None:
            self._recognizer.cancel(future)

    def _loaded(self) -> Recognizer:
        with self._lock:
            if self._recognizer is None:
                try:
                    self._recognizer = self._load()
                except ModelUnavailable as exc:
                    self.unavailable = exc
                    self._recognizer = SkippingRecognizer(exc)
            return self._recognizer
