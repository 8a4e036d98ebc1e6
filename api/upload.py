"""Reading a multipart upload from the request stream straight into a blob writer.

FastAPI's UploadFile spools the whole body before the endpoint runs, so a client could make the server write any
number of bytes before a size limit is looked at. Here the body is parsed as it arrives: the file part's first
bytes are sniffed before anything is written (an unsupported format stores nothing), its bytes go to the blob
writer in batches on a worker thread, and the limit is checked on every chunk, so an oversized upload is refused
after at most `max_bytes` of it were read.

The form: a `file` part (the document) and, optionally, option fields `layout`, `dpi`, `tasks` (repeated, or
comma-separated), `text_layer`, `password` and `callback_url`; any other field is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import Request
from pydantic import ValidationError
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from api.errors import ApiError, validation_message
from pipeline.documents.ingest import sniff
from pipeline.jobs.options import DocumentOptions
from pipeline.storage import BlobStore, BlobWriter

BODY_SLACK = 64 * 1024  # multipart framing and option fields, on top of the file's own limit
FIELD_BYTES = 16 * 1024  # one option field at most (the longest option, callback_url, is 2048 characters)
MAX_PARTS = 16
SNIFF_BYTES = 1024  # sniff() finds a PDF header anywhere in the first 1024 bytes
FLUSH_BYTES = 1 << 20  # file bytes collected before one write on a worker thread
FILE_FIELD = "file"
DEFAULT_FILENAME = "upload"


@dataclass
class ReceivedUpload:
    filename: str
    media_type: str  # sniffed from the content
    writer: BlobWriter  # every byte written, nothing committed: the caller commits (accept_upload) or aborts it
    fields: dict[str, list[str]]


@dataclass
class _Part:
    name: str = ""
    filename: str | None = None
    data: bytearray = field(default_factory=bytearray)


def too_large(max_bytes: int) -> ApiError:
    return ApiError(413, "file_too_large", f"the upload is larger than the limit of {max_bytes} bytes")


async def receive_upload(request: Request, blobs: BlobStore, max_bytes: int) -> ReceivedUpload:
    """Parse the request's multipart body as it streams in; raises ApiError (nothing kept) for a bad upload."""
    boundary = _boundary(request)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes + BODY_SLACK:
        raise too_large(max_bytes)  # refused before a byte is read
    form = _Form(blobs, max_bytes)
    parser = MultipartParser(boundary, form.callbacks())
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > max_bytes + BODY_SLACK:
                raise too_large(max_bytes)
            parser.write(chunk)
            await form.flush()
        parser.finalize()
        return await form.result()
    except MultipartParseError as exc:
        await form.abort()
        raise ApiError(400, "malformed_body", f"the multipart body cannot be parsed: {exc}") from None
    except BaseException:
        await form.abort()
        raise


def form_options(fields: dict[str, list[str]]) -> DocumentOptions:
    """The document options the form's fields spell; an empty field counts as not given (HTML forms send those)."""
    values: dict[str, object] = {}
    for name, given in fields.items():
        given = [value for value in given if value != ""]
        if name == "tasks":
            values[name] = [task.strip() for value in given for task in value.split(",") if task.strip()] or None
        elif len(given) > 1:
            raise ApiError(422, "invalid_options", f"{name}: given {len(given)} times; give it once")
        elif given:
            values[name] = given[0]
    try:
        return DocumentOptions.model_validate(values)
    except ValidationError as exc:
        raise ApiError(422, "invalid_options", validation_message(exc.errors())) from None


def _boundary(request: Request) -> bytes:
    content_type, parameters = parse_options_header(request.headers.get("content-type"))
    boundary = parameters.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise ApiError(400, "malformed_body", "the body must be multipart/form-data with a boundary")
    return boundary


class _Form:
    """The parser's callbacks: option fields collected in memory, the file part fed to a blob writer.

    Callbacks run inside `parser.write` and must not block, so they only buffer; `flush` (awaited after each
    chunk) does the disk work on a worker thread.
    """

    def __init__(self, blobs: BlobStore, max_bytes: int) -> None:
        self._blobs, self._max_bytes = blobs, max_bytes
        self._parts: list[_Part] = []
        self._header: tuple[bytearray, bytearray] = (bytearray(), bytearray())
        self._file: _Part | None = None
        self._file_bytes = 0
        self._media_type: str | None = None
        self._file_done = self._ended = False
        self._writer: BlobWriter | None = None

    def callbacks(self) -> dict[str, Callable[..., None]]:
        return {"on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._part_data,
                "on_part_end": self._part_end, "on_end": self._end}

    async def flush(self) -> None:
        """Write the file bytes collected so far, once they are a batch (or the file part is complete)."""
        if self._media_type is None or self._file is None:
            return
        pending = self._file.data
        if not pending or (len(pending) < FLUSH_BYTES and not self._file_done):
            return
        if self._writer is None:
            self._writer = await anyio.to_thread.run_sync(self._blobs.writer, self._max_bytes)
        batch = bytes(pending)
        pending.clear()
        await anyio.to_thread.run_sync(self._writer.write, batch)

    async def result(self) -> ReceivedUpload:
        if not self._ended:
            raise ApiError(400, "malformed_body", "the multipart body ended before its closing boundary")
        if self._file is None:
            raise ApiError(422, "missing_file", f"the form has no `{FILE_FIELD}` part")
        await self.flush()
        assert self._writer is not None and self._media_type is not None  # a sniffed, complete file part
        fields: dict[str, list[str]] = {}
        for part in self._parts:
            if part is not self._file:
                fields.setdefault(part.name, []).append(_text(part.data))
        return ReceivedUpload(_filename(self._file.filename), self._media_type, self._writer, fields)

    async def abort(self) -> None:
        if self._writer is not None:
            with anyio.CancelScope(shield=True):  # a canceled request (the client left) still removes its bytes
                await anyio.to_thread.run_sync(self._writer.abort)

    def _part_begin(self) -> None:
        if len(self._parts) == MAX_PARTS:
            raise ApiError(400, "malformed_body", f"the form has more than {MAX_PARTS} parts")
        self._parts.append(_Part())

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header[0].extend(data[start:end])

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._header[1].extend(data[start:end])

    def _header_end(self) -> None:
        name, value = self._header
        if bytes(name).strip().lower() == b"content-disposition":
            _, parameters = parse_options_header(bytes(value).decode("latin-1"))
            part = self._parts[-1]
            part.name = _text(parameters.get(b"name", b""))
            part.filename = _text(parameters[b"filename"]) if b"filename" in parameters else None
        self._header = (bytearray(), bytearray())

    def _headers_finished(self) -> None:
        name = self._parts[-1].name
        if not name:
            raise ApiError(400, "malformed_body", "a form part has no name (Content-Disposition: form-data; name=…)")
        if name != FILE_FIELD and name not in DocumentOptions.model_fields:
            raise ApiError(422, "invalid_options", f"{name}: not a form field (the document goes in `{FILE_FIELD}`; "
                           f"options are {', '.join(DocumentOptions.model_fields)})")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._parts[-1]
        if part.name != FILE_FIELD:
            if len(part.data) + end - start > FIELD_BYTES:
                raise ApiError(422, "invalid_options", f"{part.name}: longer than {FIELD_BYTES} bytes")
            part.data.extend(data[start:end])
            return
        if self._file is None:
            self._file = part
        elif self._file is not part:
            raise ApiError(400, "malformed_body", f"the form has more than one `{FILE_FIELD}` part")
        self._file_bytes += end - start
        if self._file_bytes > self._max_bytes:
            raise too_large(self._max_bytes)
        part.data.extend(data[start:end])
        if self._media_type is None and len(part.data) >= SNIFF_BYTES:
            self._sniff(part.data)

    def _part_end(self) -> None:
        part = self._parts[-1]
        if part.name == FILE_FIELD and self._file is None:
            self._file = part  # an empty file part: no data callback ever ran
        if part is self._file:
            self._file_done = True
            if self._media_type is None:
                self._sniff(part.data)

    def _end(self) -> None:
        self._ended = True

    def _sniff(self, head: bytearray) -> None:
        if not head:
            raise ApiError(422, "empty", "the file is empty (0 bytes)")
        media_type = sniff(bytes(head[:SNIFF_BYTES]))
        if media_type is None:
            raise ApiError(415, "unsupported_format", "the file is not a PDF, TIFF, PNG, JPEG or WebP image")
        self._media_type = media_type


def _text(raw: bytes | bytearray) -> str:
    """Browsers send names and fields as raw UTF-8; anything else is read as Latin-1 rather than refused."""
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return bytes(raw).decode("latin-1")


def _filename(raw: str | None) -> str:
    """The last path component, without control characters, at most 255 characters."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(character for character in name if character.isprintable())[:255]
    return name or DEFAULT_FILENAME


def upload_openapi() -> dict[str, Any]:
    """The multipart body for OpenAPI (the endpoint reads the stream itself, so FastAPI cannot infer it)."""
    options = DocumentOptions.model_json_schema()["properties"]
    options["tasks"]["description"] = "region kinds to recognise: repeat the field, or separate them with commas"
    file = {"type": "string", "format": "binary", "description": "PDF, TIFF, PNG, JPEG or WebP (sniffed by content)"}
    schema = {"type": "object", "required": [FILE_FIELD], "properties": {FILE_FIELD: file, **options}}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}
