"""Why a model could not be loaded, as a stable `code` for logs and a message that names the file and the fix.

Kept free of torch and transformers so the CLI can catch these errors without paying for those imports.
"""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: the message names the file (or hub id) and what to do about it."""

    def __init__(self, message: str, code: str = "bad_checkpoint") -> None:
        super().__init__(message)
        self.code = code
