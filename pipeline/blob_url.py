"""Which blob store the settings name: QUIRE_BLOB_URL=s3://bucket/prefix for an S3-compatible bucket, else the
local directory QUIRE_BLOB_DIR (the embedded default). Parsing is kept apart from the S3 store so the settings can
refuse a malformed URL at start without the optional S3 client installed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.storage import BlobStore, BlobStoreUnavailable, LocalBlobStore

if TYPE_CHECKING:
    from pipeline.config import Settings

# S3's bucket naming rules: 3-63 lowercase letters, digits, dots and hyphens, a letter or digit at each end
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # empty, or ending in "/"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_url(url: str) -> S3Location:
    """s3://bucket or s3://bucket/some/prefix; a ValueError that says what is wrong otherwise."""
    if not url.startswith("s3://"):
        raise ValueError(f"QUIRE_BLOB_URL must look like s3://bucket/prefix, not {url!r}")
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise ValueError(f"QUIRE_BLOB_URL names no valid S3 bucket (3-63 of a-z, 0-9, '.', '-'): {bucket!r}")
    prefix = "/".join(part for part in prefix.split("/") if part)
    if any(part in (".", "..") for part in prefix.split("/")):
        raise ValueError(f"QUIRE_BLOB_URL's prefix may not contain '.' or '..': {url!r}")
    return S3Location(bucket, f"{prefix}/" if prefix else "")


def open_blob_store(settings: Settings) -> BlobStore:
    """The store the settings name. An S3 store needs the `s3` extra (boto3)."""
    if not settings.blob_url:
        assert settings.blob_dir is not None  # Settings fills it in
        return LocalBlobStore(settings.blob_dir)
    try:
        from pipeline.s3_storage import S3BlobStore
    except ImportError:
        raise BlobStoreUnavailable(
            f"{settings.blob_url}: the S3 client is not installed. Install Quire with it: pip install 'quire[s3]'.",
            "blob_store_unavailable") from None
    return S3BlobStore(parse_s3_url(settings.blob_url), settings.s3_part_bytes, settings.s3_addressing_style)
