"""Archive members as streams: regular files in order, metadata skipped, and hostile archives refused whole
(bombs, too many or too large members, escaping names, links and devices, damage) before they cost much."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import struct
import tarfile
import zipfile

import pytest

from pipeline.archives import (
    RATIO_FLOOR,
    ArchiveLimits,
    ArchiveRefused,
    Member,
    Rejected,
    archive_kind,
    member_name,
    members,
)
from tests.archives import tar_bomb, tar_of, tar_with_entry, zip_bomb, zip_of, zip_with_symlink

PDF = b"%PDF-1.4\n" + b"x" * 100
PNG = b"\x89PNG\r\n\x1a\n" + b"y" * 100
COMPRESSIONS = ["", "gz", "bz2", "xz"]
DEFAULTS = ArchiveLimits()


def read(data: bytes, limits: ArchiveLimits = DEFAULTS) -> list[tuple[str, bytes] | Rejected]:
    """Every member the archive yields: (name, bytes) for one read, or its rejection."""
    kind = archive_kind(data[:1024])
    assert kind is not None
    return [item if isinstance(item, Rejected) else (item.name, item.stream.read())
            for item in members(io.BytesIO(data), kind, limits)]


def refusal(data: bytes, limits: ArchiveLimits = DEFAULTS) -> str:
    with pytest.raises(ArchiveRefused) as refused:
        read(data, limits)
    assert str(refused.value)
    return refused.value.code


def test_the_kind_comes_from_the_first_bytes() -> None:
    assert archive_kind(zip_of([("a.pdf", PDF)])) == "zip"
    assert archive_kind(zip_of([])) == "zip"  # an empty zip is its end record alone
    assert [archive_kind(tar_of([("a.pdf", PDF)], compression)) for compression in COMPRESSIONS] == [
        "tar", "gzip", "bzip2", "xz"]
    assert archive_kind(PDF) is None and archive_kind(PNG) is None and archive_kind(b"BZh? not bzip2") is None


def test_a_zip_yields_its_regular_files_in_order_skipping_directories_and_archivers_metadata() -> None:
    archive = zip_of([("report.pdf", PDF), ("scans/", b""), ("scans/page.png", PNG), ("__MACOSX/._report.pdf", PDF),
                      (".DS_Store", b"junk"), ("scans/.hidden.pdf", PDF), ("./notes.txt", b"text"),
                      ("a//b/./c.pdf", PDF)])
    assert read(archive) == [("report.pdf", PDF), ("scans/page.png", PNG), ("notes.txt", b"text"), ("a/b/c.pdf", PDF)]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_tar_plain_or_compressed_yields_the_same(compression: str) -> None:
    archive = tar_of([("report.pdf", PDF), ("scans/page.png", PNG), ("scans/.hidden.pdf", PDF)], compression)
    assert read(archive) == [("report.pdf", PDF), ("scans/page.png", PNG)]


def test_a_tar_directory_is_skipped() -> None:
    directory = tarfile.TarInfo("scans")
    directory.type = tarfile.DIRTYPE
    assert read(tar_with_entry(directory, [("scans/x.pdf", PDF)])) == [("scans/x.pdf", PDF)]


@pytest.mark.parametrize("name", ["../evil.pdf", "docs/../../evil.pdf", "/etc/passwd", "C:/evil.pdf", "c:evil.pdf",
                                  "..\\evil.pdf", "docs\\..\\..\\evil.pdf", "\\\\server\\share\\evil.pdf",
                                  ".. /evil.pdf", "docs/.../evil.pdf"])
def test_a_member_named_outside_the_archive_refuses_all_of_it(name: str) -> None:
    assert refusal(zip_of([("good.pdf", PDF), (name, PDF)])) == "unsafe_member_name"
    assert refusal(tar_of([("good.pdf", PDF), (name, PDF)])) == "unsafe_member_name"


def test_names_are_relative_paths_and_keep_dots_that_do_not_climb() -> None:
    assert member_name("a//b/./c.pdf") == "a/b/c.pdf"
    assert member_name("a\\b.pdf") == "a/b.pdf"
    assert member_name("v1..2/report..final.pdf") == "v1..2/report..final.pdf"
    assert member_name("bell\x07.pdf") == "bell.pdf"
    assert member_name("x" * 2000 + ".pdf") == ("x" * 2000 + ".pdf")[-1024:]


@pytest.mark.parametrize("entry_type", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE,
                                        tarfile.FIFOTYPE])
def test_a_link_device_or_fifo_in_a_tar_refuses_it(entry_type: bytes) -> None:
    entry = tarfile.TarInfo("looks-like.pdf")
    entry.type, entry.linkname = entry_type, "/etc/passwd"
    assert refusal(tar_with_entry(entry, [("good.pdf", PDF)])) == "unsafe_member_type"


def test_a_symlink_in_a_zip_refuses_it_before_any_member_is_read() -> None:
    archive = zip_with_symlink("looks-like.pdf", "/etc/passwd", [("good.pdf", PDF)])
    items = members(io.BytesIO(archive), "zip", ArchiveLimits())
    with pytest.raises(ArchiveRefused) as refused:
        next(items)
    assert refused.value.code == "unsafe_member_type" and "symbolic link" in str(refused.value)


def test_more_members_than_the_limit_refuse_the_archive_directories_counting() -> None:
    limits = ArchiveLimits(max_members=3)
    three = [("a.pdf", PDF), ("b/", b""), ("b/c.pdf", PDF)]
    assert len(read(zip_of(three), limits)) == 2
    assert refusal(zip_of([*three, ("d.pdf", PDF)]), limits) == "archive_too_many_members"
    assert refusal(tar_of([(f"{i}.pdf", PDF) for i in range(4)], "gz"), limits) == "archive_too_many_members"


def test_a_zip_directory_larger_than_the_member_limit_needs_is_refused_unparsed() -> None:
    long_names = zip_of([("x" * 3000 + ".pdf", PDF), ("y" * 3000 + ".pdf", PDF)])
    assert refusal(long_names, ArchiveLimits(max_members=2)) == "archive_too_many_members"
    assert len(read(long_names, ArchiveLimits(max_members=4))) == 2


def test_a_zip_bomb_is_refused_from_its_directory_before_a_byte_is_decompressed() -> None:
    bomb = zip_bomb(32 << 20)
    assert len(bomb) < 100_000
    items = members(io.BytesIO(bomb), "zip", ArchiveLimits())
    with pytest.raises(ArchiveRefused) as refused:
        next(items)  # nothing was yielded, so nothing was decompressed
    assert refused.value.code == "archive_bomb"
    assert refusal(zip_bomb(4 << 20), ArchiveLimits(max_bytes=2 << 20, max_ratio=1e9)) == "archive_too_large"


def test_a_zip_that_understates_a_size_never_produces_more_than_it_declares() -> None:
    """Why a zip's declared sizes may be trusted: zipfile stops at the declared size and the CRC check fails."""
    archive = bytearray(zip_of([("a.pdf", PDF + bytes(1 << 20))]))
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local header, directory entry
        struct.pack_into("<L", archive, archive.find(signature) + offset, len(PDF))
    items = members(io.BytesIO(bytes(archive)), "zip", ArchiveLimits())
    member = next(items)
    assert isinstance(member, Member)
    produced = 0
    with pytest.raises(ArchiveRefused) as refused:
        while chunk := member.stream.read(16):
            produced += len(chunk)
    assert refused.value.code == "corrupt_archive" and produced <= len(PDF)


@pytest.mark.parametrize("compression", ["gz", "bz2", "xz"])
@pytest.mark.parametrize("read_members", [True, False])
def test_a_tar_bomb_is_refused_while_it_decompresses_having_produced_no_more_than_the_limit(
        compression: str, read_members: bool) -> None:
    """Whether its member is read or skipped: skipping a tar member decompresses it too."""
    limits = ArchiveLimits(max_ratio=10)
    bomb = tar_bomb(8 << 20, compression)
    allowed = max(limits.max_ratio * len(bomb), RATIO_FLOOR)
    produced = 0
    with pytest.raises(ArchiveRefused) as refused:
        for member in members(io.BytesIO(bomb), archive_kind(bomb[:1024]), limits):  # type: ignore[arg-type]
            while read_members and (chunk := member.stream.read(64 * 1024)):
                produced += len(chunk)
    assert refused.value.code == "archive_bomb"
    assert produced <= allowed < 8 << 20


def test_a_tar_larger_than_the_total_limit_is_refused() -> None:
    archive = tar_of([(f"{i}.pdf", PDF + bytes(1000)) for i in range(3)], "gz")
    assert refusal(archive, ArchiveLimits(max_bytes=2500)) == "archive_too_large"
    assert len(read(archive, ArchiveLimits(max_bytes=20_000))) == 3  # the tar's own headers and padding count


def test_encrypted_and_bzip2_members_of_a_zip_are_rejected_alone() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("good.pdf", PDF)
        archive.writestr(zipfile.ZipInfo("packed.pdf"), PDF, compress_type=zipfile.ZIP_BZIP2)
        archive.writestr("locked.pdf", PDF)
    flagged = bytearray(buffer.getvalue())  # zipfile writes no encrypted members: set the flag in the directory
    entry = flagged.find(b"PK\x01\x02", flagged.find(b"packed.pdf", flagged.find(b"PK\x01\x02")))
    flagged[entry + 8] |= 0x1
    good, packed, locked_member = read(bytes(flagged))
    assert good == ("good.pdf", PDF)
    assert (packed.name, packed.code) == ("packed.pdf", "unsupported_compression")  # type: ignore[union-attr]
    assert (locked_member.name, locked_member.code) == ("locked.pdf", "encrypted")  # type: ignore[union-attr]


def test_damaged_archives_are_corrupt() -> None:
    archive = zip_of([("a.pdf", PDF * 50)])
    assert refusal(archive[:-30]) == "corrupt_archive"  # the end record cut
    flipped = bytearray(archive)
    flipped[60] ^= 0xFF  # inside the deflated data
    assert refusal(bytes(flipped)) == "corrupt_archive"
    tar = tar_of([("a.pdf", PDF * 50)], "gz")
    assert refusal(tar[: len(tar) // 2]) == "corrupt_archive"
    assert refusal(gzip.compress(PDF)) == "corrupt_archive"  # a gzipped PDF is not a tar
    assert refusal(bz2.compress(b"not a tar" * 100)) == "corrupt_archive"
    assert refusal(lzma.compress(b"")) == "corrupt_archive"
