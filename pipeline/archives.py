"""The members of an uploaded zip or tar archive as streams, under limits that hold against hostile archives.

Nothing is extracted to disk under a member's name: members are read as streams, so a name is only a label. Still,
a name that would leave the directory it were extracted to (absolute, `..`, a drive letter, a backslash path) and a
member that is neither a regular file nor a directory (a symbolic or hard link, a device, a FIFO) refuse the whole
archive: an archive built to attack extractors is not a batch of documents, and refusing it whole is simpler to
trust than picking its harmless members out. Directories are skipped, and so are `__MACOSX/` and dot-files: the
metadata archivers add, not documents. An encrypted zip member, or one compressed other than stored or deflated, is
rejected alone (`Rejected`); Python decompresses bzip2 and LZMA zip members without an output bound, so those are
never read.

The limits: entries of any kind (`max_members`), decompressed bytes of all members together (`max_bytes`), and
the ratio of decompressed to compressed bytes (`max_ratio`, checked past RATIO_FLOOR bytes). A tar declares nothing
about compression, so its stream is counted as it is decompressed, in bounded steps, and the count is checked
against the compressed bytes read so far before a step's bytes are handed on: a bomb is refused having produced
at most one step past the limit, whether or not its member is ever read. A zip's directory declares every member's
sizes, and zipfile never produces more than a member declares (it stops there, and the CRC check fails), so the
declared sizes bound decompression: they are checked before a byte is decompressed, per member against its
compressed size and all together against the file's size (members sharing compressed data). The directory itself
is sized from its end record before zipfile parses it, so a directory of millions of entries is refused unread.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Literal

ArchiveKind = Literal["zip", "tar", "gzip", "bzip2", "xz"]

RATIO_FLOOR = 1 << 20  # decompressed bytes below which the compression ratio is not checked (tiny, repetitive files)
MAX_NAME = 1024  # characters of a member's name kept (the tail), as Document.filename holds at most this many
_DIRECTORY_ENTRY_BYTES = 2048  # a zip directory entry's fixed part, a long name and its extra fields
_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
_ENCRYPTED = 0x1  # general purpose flag bit 0
_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_DRIVE = re.compile(r"[A-Za-z]:")
_SPECIAL_MODES = {stat.S_IFLNK: "symbolic link", stat.S_IFCHR: "device", stat.S_IFBLK: "device",
                  stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket"}
_SPECIAL_TAR_TYPES = {tarfile.SYMTYPE: "symbolic link", tarfile.LNKTYPE: "hard link", tarfile.CHRTYPE: "device",
                      tarfile.BLKTYPE: "device", tarfile.FIFOTYPE: "FIFO"}
_DECOMPRESSED: dict[str, Callable[[BinaryIO], BinaryIO]] = {
    "gzip": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"), "bzip2": bz2.BZ2File, "xz": lzma.LZMAFile}
# What reading a damaged archive raises; OSError covers gzip's and bzip2's "not a valid stream".
_CORRUPT = (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, struct.error,
            ValueError, NotImplementedError)


class ArchiveRefused(Exception):
    """The whole archive is refused. `code`: archive_too_many_members, archive_too_large, archive_bomb,
    unsafe_member_name, unsafe_member_type or corrupt_archive."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ArchiveLimits:
    max_members: int = 1000  # entries of any kind, directories included
    max_bytes: int = 2 << 30  # decompressed, all members together
    max_ratio: float = 100.0  # decompressed / compressed


@dataclass(frozen=True)
class Member:
    """A regular file of the archive. Read its stream before asking for the next member: a tar is one stream."""

    name: str  # its path in the archive, `/`-separated, printable
    stream: BinaryIO


@dataclass(frozen=True)
class Rejected:
    """A member (or an uploaded file) that does not become a document, and why; the rest of the batch goes on."""

    name: str
    code: str
    message: str


def archive_kind(head: bytes) -> ArchiveKind | None:
    """The archive the first bytes (at least 262 for a plain tar) begin, if any. A compressed stream is taken for a
    compressed tar; reading it tells (a gzipped PDF is a `corrupt_archive`)."""
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh") and head[3:4].isdigit():
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head[257:262] == b"ustar":
        return "tar"
    return None


def members(archive: BinaryIO, kind: ArchiveKind, limits: ArchiveLimits) -> Iterator[Member | Rejected]:
    """The archive's regular files in order, and its members that are not read. Raises ArchiveRefused for an
    archive refused whole, for a tar possibly after some members were yielded. `archive` is a seekable file."""
    read = _zip_members if kind == "zip" else _tar_members
    try:
        yield from read(archive, kind, limits)
    except _CORRUPT as exc:
        raise _corrupt(exc) from None


def member_name(raw: str) -> str:
    """raw as a relative `/`-separated path ("" for the archive's root). Raises ArchiveRefused `unsafe_member_name`
    for a name that leaves its directory: absolute, with a drive, or with a `..` component, backslashes counting as
    separators and a component of dots and spaces as `..` (Windows trims trailing dots and spaces)."""
    path = raw.replace("\\", "/")
    parts = path.split("/")
    if path.startswith("/") or _DRIVE.match(path) or any(_climbs(part) for part in parts):
        raise ArchiveRefused("unsafe_member_name", f"the archive has a member named {raw!r}, which points outside it")
    name = "/".join(part for part in parts if part not in ("", "."))
    return "".join(character for character in name if character.isprintable())[-MAX_NAME:]


def _climbs(part: str) -> bool:
    """`..`, or a component of dots and spaces that Windows trims down to one."""
    return part not in ("", ".") and part.strip(". ") == ""


def _zip_members(archive: BinaryIO, _kind: ArchiveKind, limits: ArchiveLimits) -> Iterator[Member | Rejected]:
    entries, directory_bytes = _zip_directory(archive)
    if entries > limits.max_members or directory_bytes > limits.max_members * _DIRECTORY_ENTRY_BYTES:
        raise _too_many(limits)
    size = archive.seek(0, os.SEEK_END)
    with zipfile.ZipFile(archive) as zipped:
        infos = zipped.infolist()
        if len(infos) > limits.max_members:
            raise _too_many(limits)
        _check_declared_sizes(infos, size, limits)
        named = [(name, info) for info in infos if (name := _zip_entry(info)) is not None]  # all checked first
        for name, info in named:
            if info.flag_bits & _ENCRYPTED:
                yield Rejected(name, "encrypted", "the member is encrypted; Quire cannot open it")
            elif info.compress_type not in _ZIP_METHODS:
                yield Rejected(name, "unsupported_compression", f"the member is compressed with method "
                               f"{info.compress_type}; Quire reads {' and '.join(_ZIP_METHODS.values())} members")
            else:
                with zipped.open(info) as raw:
                    yield Member(name, _Tap(raw))


def _zip_directory(archive: BinaryIO) -> tuple[int, int]:
    """(entries, bytes) of the central directory by the end records, found the way zipfile finds them (the last
    end record in the final 64 KiB), before zipfile reads the whole directory into memory."""
    end = archive.seek(0, os.SEEK_END)
    archive.seek(max(0, end - _EOCD.size - 0xFFFF))  # the record, then a comment of at most 64 KiB
    tail = archive.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise ArchiveRefused("corrupt_archive", "the zip archive has no end of central directory record")
    _, _, _, _, entries, size, _, _ = _EOCD.unpack_from(tail, at)
    locator = at - _ZIP64_LOCATOR.size
    if locator >= 0 and tail[locator:locator + 4] == b"PK\x06\x07":
        archive.seek(_ZIP64_LOCATOR.unpack_from(tail, locator)[2])
        record = archive.read(_ZIP64_EOCD.size)
        if len(record) < _ZIP64_EOCD.size or not record.startswith(b"PK\x06\x06"):
            raise ArchiveRefused("corrupt_archive", "the zip archive's zip64 end record is missing")
        entries, size = _ZIP64_EOCD.unpack(record)[7:9]
    return entries, size


def _zip_entry(info: zipfile.ZipInfo) -> str | None:
    """The name of a regular file to read; None for a directory or metadata; raises for an unsafe member."""
    name = member_name(info.filename)
    mode = stat.S_IFMT(info.external_attr >> 16)  # the Unix file type, 0 when the archiver recorded none
    if mode not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise _unsafe_type(name, _SPECIAL_MODES.get(mode, "special file"))
    if info.is_dir() or mode == stat.S_IFDIR or not name or _skipped(name):
        return None
    return name


def _check_declared_sizes(infos: list[zipfile.ZipInfo], archive_size: int, limits: ArchiveLimits) -> None:
    total = 0
    for info in infos:
        _check_ratio(info.file_size, info.compress_size, limits)
        total += info.file_size
    _check_total(total, limits)
    _check_ratio(total, archive_size, limits)


def _tar_members(archive: BinaryIO, kind: ArchiveKind, limits: ArchiveLimits) -> Iterator[Member]:
    archive.seek(0)
    compressed = _Counter()
    raw = _Tap(archive, compressed.add)
    decompressed = raw if kind == "tar" else _DECOMPRESSED[kind](raw)  # bounded steps, unlike tarfile's own
    meter = _Meter(limits, lambda: compressed.total)
    with tarfile.open(fileobj=_Tap(decompressed, meter.count), mode="r|") as tar:
        for count, info in enumerate(tar, 1):
            if count > limits.max_members:
                raise _too_many(limits)
            name = _tar_entry(info)
            if name is not None:
                stream = tar.extractfile(info)
                assert stream is not None  # a regular file
                yield Member(name, _Tap(stream))  # which reports a damaged stream as the others do


def _tar_entry(info: tarfile.TarInfo) -> str | None:
    name = member_name(info.name)
    if not (info.isreg() or info.isdir()):
        raise _unsafe_type(name, _SPECIAL_TAR_TYPES.get(info.type, "special file"))
    if info.isdir() or not name or _skipped(name):
        return None
    return name


def _skipped(name: str) -> bool:
    parts = name.split("/")
    return parts[0] == "__MACOSX" or any(part.startswith(".") for part in parts)


class _Counter:
    def __init__(self) -> None:
        self.total = 0

    def add(self, size: int) -> None:
        self.total += size


class _Meter:
    """Decompressed bytes as they are produced, against the total and the ratio to the compressed bytes behind
    them (`compressed` tells how many)."""

    def __init__(self, limits: ArchiveLimits, compressed: Callable[[], int]) -> None:
        self._limits, self._compressed = limits, compressed
        self.total = 0

    def count(self, size: int) -> None:
        self.total += size
        _check_total(self.total, self._limits)
        _check_ratio(self.total, self._compressed(), self._limits)


def _check_total(decompressed: int, limits: ArchiveLimits) -> None:
    if decompressed > limits.max_bytes:
        raise ArchiveRefused("archive_too_large", f"the archive decompresses to more than {limits.max_bytes} bytes")


def _check_ratio(decompressed: int, compressed: int, limits: ArchiveLimits) -> None:
    if decompressed > max(limits.max_ratio * compressed, RATIO_FLOOR):
        raise ArchiveRefused("archive_bomb", f"the archive decompresses to more than {limits.max_ratio:g} times "
                             "its compressed size")


class _Tap(io.RawIOBase):
    """A read-only stream over source that tells `seen` each read's size before handing the bytes on (`seen` may
    refuse the archive), and reports a damaged source as ArchiveRefused `corrupt_archive`."""

    def __init__(self, source: BinaryIO, seen: Callable[[int], None] = lambda _size: None) -> None:
        super().__init__()
        self._source, self._seen = source, seen

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        try:
            data = self._source.read(len(buffer))
        except _CORRUPT as exc:
            raise _corrupt(exc) from None
        self._seen(len(data))
        buffer[:len(data)] = data
        return len(data)


def _corrupt(exc: BaseException) -> ArchiveRefused:
    return ArchiveRefused("corrupt_archive", f"the archive cannot be read: {exc or type(exc).__name__}")


def _too_many(limits: ArchiveLimits) -> ArchiveRefused:
    return ArchiveRefused("archive_too_many_members", f"the archive has more than {limits.max_members} members")


def _unsafe_type(name: str, kind: str) -> ArchiveRefused:
    return ArchiveRefused("unsafe_member_type", f"the archive's member {name!r} is a {kind}, not a regular file")
