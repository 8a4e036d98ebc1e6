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

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
from fastapi import Request
from pydantic import ValidationError
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from api.errors import ApiError, validation_message
from pipeline.documents.source import FORMATS, SNIFF_BYTES, sniff
from pipeline.jobs.options import DocumentOptions
from pipeline.storage import BlobStore, BlobWriter

BODY_SLACK = 64 * 1024  # multipart framing and option fields, on top of the file's own limit
FIELD_BYTES = 16 * 1024  # one option field at most (the longest option, callback_url, is 2048 characters)
MAX_PARTS = 16
FLUSH_BYTES = 1 << 20  # file bytes collected before one write on a worker thread
FILE_FIELD = "file"
DEFAULT_FILENAME = "upload"

R = TypeVar("R")


@dataclass
class ReceivedUpload:
    filename: str
    media_type: str  # sniffed from the content
    writer: BlobWriter  # every byte written, nothing committed: the caller commits (accept_upload) or aborts it
    fields: dict[str, list[str]]


@dataclass
class FormPart:
    """One part of the form: its name, the client's file name, and its bytes buffered (an option field's value, or
    a file's bytes not flushed yet)."""

    name: str = ""
    filename: str | None = None
    data: bytearray = field(default_factory=bytearray)


def too_large(max_bytes: int) -> ApiError:
    return ApiError(413, "file_too_large", f"the upload is larger than the limit of {max_bytes} bytes")


async def receive_upload(request: Request, blobs: BlobStore, max_bytes: int) -> ReceivedUpload:
    """Parse the request's multipart body as it streams in; raises ApiError (nothing kept) for a bad upload."""
    return await receive_form(request, _Form(blobs, max_bytes), max_bytes)


async def receive_form(request: Request, form: MultipartForm[R], max_bytes: int) -> R:
    """Feed the request's body to form as it streams in, refusing a body of more than max_bytes (plus framing) by
    its Content-Length or while it arrives; raises ApiError, having thrown away what the form kept, when it fails."""
    boundary = _boundary(request)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes + BODY_SLACK:
        raise too_large(max_bytes)  # refused before a byte is read
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


class MultipartForm(ABC, Generic[R]):
    """The parser's callbacks: part headers read, option fields collected in memory, `file` parts handed to the
    subclass (`_file_data`, `_file_end`), which `result` turns into what the endpoint reads.

    Callbacks run inside `parser.write` and must not block, so they only buffer; `flush` (awaited after each
    chunk) does the disk work on a worker thread.
    """

    def __init__(self, max_parts: int = MAX_PARTS) -> None:
        self._max_parts = max_parts
        self._parts: list[FormPart] = []
        self._header: tuple[bytearray, bytearray] = (bytearray(), bytearray())
        self._ended = False

    def callbacks(self) -> dict[str, Callable[..., None]]:
        return {"on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._part_data,
                "on_part_end": self._part_end, "on_end": self._end}

    @abstractmethod
    async def flush(self) -> None:
        """Write the file bytes collected so far where they go."""

    @abstractmethod
    async def result(self) -> R:
        """What the form held, once the body has ended; raises ApiError for a form that lacks something."""

    @abstractmethod
    async def abort(self) -> None:
        """Throw away every byte kept so far (the request failed or went away)."""

    @abstractmethod
    def _file_data(self, part: FormPart, data: bytes) -> None:
        ...

    @abstractmethod
    def _file_end(self, part: FormPart) -> None:
        ...

    def fields(self) -> dict[str, list[str]]:
        """The option fields by name, each value as often as it was given."""
        fields: dict[str, list[str]] = {}
        for part in self._parts:
            if part.name != FILE_FIELD:
                fields.setdefault(part.name, []).append(_text(part.data))
        return fields

    def _check_ended(self) -> None:
        if not self._ended:
            raise ApiError(400, "malformed_body", "the multipart body ended before its closing boundary")

    def _part_begin(self) -> None:
        if len(self._parts) == self._max_parts:
            raise ApiError(400, "malformed_body", f"the form has more than {self._max_parts} parts")
        self._parts.append(FormPart())

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
        if part.name == FILE_FIELD:
            self._file_data(part, data[start:end])
            return
        if len(part.data) + end - start > FIELD_BYTES:
            raise ApiError(422, "invalid_options", f"{part.name}: longer than {FIELD_BYTES} bytes")
        part.data.extend(data[start:end])

    def _part_end(self) -> None:
        part = self._parts[-1]
        if part.name == FILE_FIELD:
            self._file_end(part)

    def _end(self) -> None:
        self._ended = True


class _Form(MultipartForm[ReceivedUpload]):
    """One `file` part, its first bytes sniffed before anything is written, fed to a blob writer."""

    def __init__(self, blobs: BlobStore, max_bytes: int) -> None:
        super().__init__()
        self._blobs, self._max_bytes = blobs, max_bytes
        self._file: FormPart | None = None
        self._file_bytes = 0
        self._media_type: str | None = None
        self._file_done = False
        self._writer: BlobWriter | None = None

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
        self._check_ended()
        if self._file is None:
            raise ApiError(422, "missing_file", f"the form has no `{FILE_FIELD}` part")
        await self.flush()
        assert self._writer is not None and self._media_type is not None  # a sniffed, complete file part
        return ReceivedUpload(clean_filename(self._file.filename), self._media_type, self._writer, self.fields())

    async def abort(self) -> None:
        if self._writer is not None:
            with anyio.CancelScope(shield=True):  # a canceled request (the client left) still removes its bytes
                await anyio.to_thread.run_sync(self._writer.abort)

    def _file_data(self, part: FormPart, data: bytes) -> None:
        self._take(part)
        self._file_bytes += len(data)
        if self._file_bytes > self._max_bytes:
            raise too_large(self._max_bytes)
        part.data.extend(data)
        if self._media_type is None and len(part.data) >= SNIFF_BYTES:
            self._sniff(part.data)

    def _file_end(self, part: FormPart) -> None:
        self._take(part)  # an empty file part: no data callback ever ran
        self._file_done = True
        if self._media_type is None:
            self._sniff(part.data)

    def _take(self, part: FormPart) -> None:
        if self._file is None:
            self._file = part
        elif self._file is not part:
            raise ApiError(400, "malformed_body", f"the form has more than one `{FILE_FIELD}` part")

    def _sniff(self, head: bytearray) -> None:
        if not head:
            raise ApiError(422, "empty", "the file is empty (0 bytes)")
        media_type = sniff(bytes(head[:SNIFF_BYTES]))
        if media_type is None:
            raise ApiError(415, "unsupported_format", f"the file is not {FORMATS}")
        self._media_type = media_type


def _text(raw: bytes | bytearray) -> str:
    """Browsers send names and fields as raw UTF-8; anything else is read as Latin-1 rather than refused."""
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return bytes(raw).decode("latin-1")


def clean_filename(raw: str | None) -> str:
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
