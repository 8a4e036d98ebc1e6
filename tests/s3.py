"""The real S3 server the S3 blob store's tests use: Ceph's radosgw at 127.0.0.1:7480 that `make test` starts
(scripts/test-setup), with the user and keys made there. Each test (or service) gets a bucket of its own, emptied
and removed afterwards, and these helpers read what a bucket holds: objects, and multipart uploads still open."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError

ENDPOINT = "http://127.0.0.1:7480"
# the standard AWS variables every process that uses the bucket runs with; no config or credentials file of the
# machine's is read, so a developer's own AWS profile cannot leak in
ENV = {"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ACCESS_KEY_ID": "quire-test", "AWS_SECRET_ACCESS_KEY": "quire-test-secret",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/nonexistent",
       "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}


def client() -> Any:
    return boto3.client("s3", endpoint_url=ENDPOINT, aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"], region_name=ENV["AWS_DEFAULT_REGION"],
                        config=Config(s3={"addressing_style": "path"}))


@contextmanager
def fresh_bucket(name: str = "quire-test") -> Iterator[str]:
    """A new, empty bucket; emptied (objects and open multipart uploads) and removed afterwards."""
    s3 = client()
    bucket = f"{name}-{uuid.uuid4().hex[:12]}"
    try:
        s3.create_bucket(Bucket=bucket)
    except EndpointConnectionError as exc:
        pytest.fail(f"the S3 server at {ENDPOINT} is not reachable (`make test` starts it: scripts/test-setup): {exc}")
    try:
        yield bucket
    finally:
        for upload in open_uploads(bucket):
            s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        for key in objects(bucket):
            s3.delete_object(Bucket=bucket, Key=key)
        s3.delete_bucket(Bucket=bucket)


def objects(bucket: str, prefix: str = "") -> list[str]:
    """Every object key in the bucket under prefix."""
    pages = client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def open_uploads(bucket: str) -> list[dict[str, Any]]:
    """Multipart uploads started in the bucket and neither completed nor aborted."""
    return client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def blob_keys(bucket: str) -> set[str]:
    """The content addresses of the blobs in the bucket (its objects but the temporary ones)."""
    return {Path(key).name for key in objects(bucket) if "/tmp/" not in f"/{key}"}
