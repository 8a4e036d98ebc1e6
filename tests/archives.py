"""Archives made for tests: zips and tars of given members, and hostile ones (bombs, links, escaping names)."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from collections.abc import Sequence

Members = Sequence[tuple[str, bytes]]


def zip_of(members: Members, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


def add_files(archive: tarfile.TarFile, members: Members) -> None:
    """Regular-file entries, one per (name, data)."""
    for name, data in members:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))


def tar_of(members: Members, compression: str = "") -> bytes:
    """A tar (compression: "", "gz", "bz2" or "xz") of regular files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as archive:
        add_files(archive, members)
    return buffer.getvalue()


def tar_with_entry(entry: tarfile.TarInfo, members: Members = ()) -> bytes:
    """A plain tar of members and one entry without data (a link, a device, a FIFO, a directory)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        add_files(archive, members)
        archive.addfile(entry)
    return buffer.getvalue()


def zip_with_symlink(name: str, target: str, members: Members = ()) -> bytes:
    """A zip of members and a Unix symbolic link (its mode in the external attributes, its target as its data)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member, data in members:
            archive.writestr(member, data)
        link = zipfile.ZipInfo(name)
        link.create_system = 3  # Unix
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, target)
    return buffer.getvalue()


def zeros(size: int, head: bytes = b"%PDF-1.4\n") -> io.BufferedReader:
    """A stream of head and then zeros, size bytes in all, never held in memory whole: what a bomb expands to."""
    return io.BufferedReader(_Zeros(head, size))


def zip_bomb(size: int, name: str = "bomb.pdf") -> bytes:
    """One deflated member of size bytes, nearly all zeros (about 1 KiB of archive per MiB), that starts like a
    PDF, so it would be read as a document."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive, archive.open(name, "w") as member:
        source = zeros(size)
        while chunk := source.read(1 << 20):
            member.write(chunk)
    return buffer.getvalue()


def tar_bomb(size: int, compression: str = "gz", name: str = "bomb.pdf", before: Members = ()) -> bytes:
    """A tar of the members `before`, then one of size bytes, nearly all zeros, that starts like a PDF."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as archive:
        add_files(archive, before)
        info = tarfile.TarInfo(name)
        info.size = size
        archive.addfile(info, zeros(size))
    return buffer.getvalue()


class _Zeros(io.RawIOBase):
    def __init__(self, head: bytes, size: int) -> None:
        super().__init__()
        self._head, self._left = head, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size = min(len(buffer), self._left)
        head, self._head = self._head[:size], self._head[size:]
        buffer[:size] = head + bytes(size - len(head))
        self._left -= size
        return size
