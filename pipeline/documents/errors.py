"""The one exception type for bad input documents, carrying a stable machine-readable code.

The code is what a client sees on the document or page (the API and the DB store it), so it must never
change once shipped; the message is for humans and may be reworded freely.
"""

from __future__ import annotations

from typing import Literal, get_args

ErrorCode = Literal[
    "unsupported_format",  # not a PDF / TIFF / PNG / JPEG / WebP by its content
    "corrupt",  # recognised format, but the bytes cannot be parsed (even after repair)
    "encrypted",  # needs a password, and none or a wrong one was given
    "empty",  # a well-formed document with nothing in it (zero pages, zero bytes)
    "too_many_pages",  # more pages than Limits.max_pages
    "file_too_large",  # more bytes than Limits.max_file_bytes
    "page_too_large",  # a page image with more pixels than Limits.max_page_pixels (pixel-bomb guard)
]

ERROR_CODES: frozenset[str] = frozenset(get_args(ErrorCode))


class DocumentError(Exception):
    """A problem with the input document itself (not with Quire), reported to the client by `code`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown document error code {code!r}")
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message

    def __reduce__(self) -> tuple[type[DocumentError], tuple[str, str]]:
        # Celery and multiprocessing pickle exceptions; the default reduce would pass only the message back.
        return (type(self), (self.code, self.message))

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"DocumentError({self.code!r}, {self.message!r})"
