"""Which blob store the settings name: QUIRE_BLOB_URL=s3://bucket/prefix for an S3-compatible bucket, else the
local directory QUIRE_BLOB_DIR (the embedded default)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.s3_location import parse_s3_url
from pipeline.storage import BlobStore, BlobStoreUnavailable, LocalBlobStore

if TYPE_CHECKING:
    from pipeline.config import Settings

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
