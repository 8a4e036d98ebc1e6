"""Every error the API returns has one JSON shape, `{"error": {"code": "...", "message": "..."}}`.

Clients branch on `code`, which is stable; `message` is for people and may change. FastAPI's own errors (an unknown
route, a wrong method, a malformed query parameter) are rewritten into the same shape, so a client needs one error
parser for everything.

A database that cannot be reached (restarting, failing over, refusing connections) is a 503
`database_unavailable` with a Retry-After, never a 500: nothing the request did is half-kept (each write is one
transaction, and an upload's blob is content-addressed, so the same upload retried later is accepted as new).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg import OperationalError as PsycopgOperationalError
from pydantic import BaseModel
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from pipeline.storage import BlobTooLarge
from pipeline.webhooks import CallbackRefused

# Codes for FastAPI's and Starlette's own HTTP errors; anything else is `http_error`.
_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "file_too_large"}
# The database errors that mean "not reachable now, try again" rather than a bug
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError, DisconnectionError, PsycopgOperationalError)
RETRY_AFTER_S = 5


class ErrorDetail(BaseModel):
    """A stable `code` and a `message` for people: an error response's, and a failed document's or page's `error`."""

    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class ApiError(Exception):
    """Raised anywhere in a request to answer with `status` and the error shape."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorDetail(code=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries saying that these statuses carry the error shape."""
    return {status: {"model": ErrorResponse} for status in statuses}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(BlobTooLarge, _blob_too_large)
    app.add_exception_handler(CallbackRefused, _callback_refused)
    for error in DATABASE_UNAVAILABLE:
        app.add_exception_handler(error, _database_unavailable)


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), exc.headers)  # 405 keeps its Allow header


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, "invalid_request", validation_message(exc.errors()))


async def _blob_too_large(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BlobTooLarge)
    return error_response(413, exc.code, str(exc))


async def _callback_refused(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CallbackRefused)
    return error_response(422, exc.code, str(exc))


async def _database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DATABASE_UNAVAILABLE)
    return error_response(503, "database_unavailable", "the database is not reachable right now; retry later",
                          {"Retry-After": str(RETRY_AFTER_S)})


def validation_message(errors: Any) -> str:
    """Pydantic's errors as one line: `where: what` for each, `;`-separated."""
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)
