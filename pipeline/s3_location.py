"""Where in S3 the blobs go, parsed from QUIRE_BLOB_URL. Kept apart from the S3 store (and its optional client) so
the settings can refuse a malformed URL at start without boto3 installed."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
