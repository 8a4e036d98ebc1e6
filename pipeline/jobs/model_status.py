"""Whether a recognition host's model loads, in the form /readyz reports it and GPU workers publish it.

A checkpoint that cannot load (missing, incomplete, corrupt) fails every region that needs the model; saying so at
/readyz, with the loader's stable code, lets an operator see it before the first upload rather than in a failed
document. The host that tried (embedded workers, a GPU worker) records a ModelStatus; the API only reads it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from pipeline.documents.lazy_recognizer import ABSENT

# The code of a failure that carries none of its own (CheckpointError always does; a CUDA error does not).
LOAD_FAILED = "model_load_failed"


@dataclass(frozen=True)
class ModelStatus:
    model: str  # the model as configured: a directory or a hub id
    code: str | None = None  # None: the model loads (or passed its check); else the stable code of why not
    message: str | None = None  # one line, naming the file and the fix

    @classmethod
    def failed(cls, model: str, exc: Exception) -> ModelStatus:
        code = getattr(exc, "code", None)
        return cls(model, code or LOAD_FAILED, str(exc) if code else f"{type(exc).__name__}: {exc}")

    @property
    def absent(self) -> bool:
        """No model, none asked for or none on this machine: the service is up, its regions are skipped."""
        return self.code in ABSENT

    @property
    def problem(self) -> str | None:
        """The /readyz problem line, or None when the model loads (or is absent, which is no fault of the service)."""
        return None if self.code is None or self.absent else f"model: {self.code}: {self.message}"

    @property
    def note(self) -> str | None:
        """The /readyz note that the service runs without a model, and why; None when it has one (or a problem)."""
        return f"model: {self.code}: {self.message} (regions that need the model are skipped)" if self.absent else None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelStatus:
        return cls(**json.loads(text))
