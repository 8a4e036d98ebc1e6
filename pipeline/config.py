"""One Settings object for every part of Quire, read from QUIRE_* environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pipeline.engine.prompts import Task
from pipeline.s3_location import parse_s3_url

ApiKeysMode = Literal["auto", "required", "off"]
# the page rendering resolutions an upload's `dpi` and `quire process --dpi` take, one range for both: 0 cannot
# render, and past 600 a large page passes the render cap and would be lowered anyway
DPI_MIN, DPI_MAX = 18, 600


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="QUIRE_", env_file=".env", extra="ignore")

    model: str = "PaddlePaddle/PaddleOCR-VL"
    # the engine: auto and None mean CUDA, bf16 and a large batch when torch sees a GPU, else the CPU, fp32 and a
    # smaller batch (pipeline/engine/devices.py); pipeline/engine_settings.py turns these into the engine's keywords
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    max_num_seqs: PositiveInt | None = None  # sequences decoded together at most; None: 256 on CUDA, 32 on a CPU
    max_num_batched_tokens: PositiveInt | None = None  # tokens in one engine step; None: 8192 on CUDA, 4096 on a CPU
    kv_cache_memory: PositiveInt | None = None  # bytes of KV cache; None: kv_cache_fraction of the free GPU memory
    # share of the GPU memory free when the engine starts: a layout model on that GPU must be loaded before it
    kv_cache_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 0.8
    prefix_cache_tokens: PositiveInt = 262144  # finished requests' KV kept findable; each block's entry is host memory
    # entries in each of oneDNN's two primitive caches on a CPU; a GEMM primitive (weight shape, row count) takes two
    onednn_cache_entries: PositiveInt = 512
    cuda_graphs: bool = True  # decode steps replayed as CUDA graphs; QUIRE_CUDA_GRAPHS=0 runs them eagerly
    # the decoder's and the head's weights, quantized as they load (a checkpoint written by `quire models quantize`
    # loads in its own scheme); QUIRE_QUANTIZATION_GROUP_SIZE: int4's group (32, 64 or 128; None: 64)
    quantization: Literal["none", "int8", "int4"] = "none"
    quantization_group_size: PositiveInt | None = None
    # generated tokens per region: QUIRE_MAX_TOKENS for every task (PaddleX allows 8192, so dense tables and long
    # text regions are not cut off), less where a task never needs more (engine_settings.SHORT_TASKS), and
    # QUIRE_TASK_MAX_TOKENS='{"formula": 2048}' per task over both
    max_tokens: PositiveInt = 8192
    task_max_tokens: dict[Task, PositiveInt] = {}
    max_image_pixels: int = 100_000_000
    cache_dir: Path = Path.home() / ".cache" / "quire"
    # documents (`quire process`, the workers)
    dpi: int = 200  # page rendering resolution
    layout: str = "auto"  # auto | pp-doclayout | pdf | page
    layout_model: str = "PaddlePaddle/PP-DocLayoutV2_safetensors"  # PP-DocLayoutV2/V3: local directory or hub id
    layout_device: str = ""  # where the layout model runs; empty: the engine's device
    text_layer: Literal["auto", "off"] = "auto"  # born-digital text regions take the PDF's own text
    crop_margin_pt: float = 2.0  # region crops grow by this much on each side
    recognize_charts: bool = False  # charts are pictures unless this asks for `Chart Recognition:`
    recognize_seals: bool = False  # seals are pictures unless this asks for `Seal Recognition:`
    # pages between their render and their document's output in `quire process`, over all documents; None: enough
    # to fill the engine's batch (64 on CUDA, 16 on a CPU: engine_settings.pages_in_flight)
    pages_in_flight: PositiveInt | None = None
    # processes that render, lay out and crop pages for `quire process`; None: the machine's cores, less one where
    # the engine runs on the CPU (and 0, this thread, for the one-document `process()`); 0: this thread
    process_workers: Annotated[int, Field(ge=0)] | None = None
    # the Celery queue of the prepare stage (render, layout): `gpu` runs it beside the engine, on the GPU worker
    prepare_queue: Literal["cpu", "gpu"] = "cpu"
    max_upload_bytes: int = 200 * 1024 * 1024  # an upload past this is refused while it streams in
    max_pages: int = 2000  # a document with more pages fails with `too_many_pages`
    # batches (POST /v1/batches): a request's files, or its one archive's entries of any kind, at most
    max_archive_members: int = 1000
    max_archive_bytes: int = 2 << 30  # a batch's documents, decompressed, all together (and its request body)
    max_compression_ratio: float = 100.0  # an archive decompressing past this ratio is refused as a bomb
    # service (database, blobs); empty means "under cache_dir", filled in below
    database_url: str = ""  # sqlite:///path or postgresql+psycopg://user@host/db
    blob_dir: Path | None = None  # uploaded files and page images by content address
    # s3://bucket/prefix: blobs in an S3-compatible bucket instead (machines need no shared disk); endpoint, region
    # and credentials from the AWS variables and files (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...); needs quire[s3]
    blob_url: str = ""
    s3_addressing_style: Literal["path", "virtual", "auto"] = "path"  # path: MinIO, Ceph; virtual or auto: AWS too
    s3_part_bytes: Annotated[int, Field(ge=5 << 20)] = 8 << 20  # an upload goes to S3 in parts of this size
    broker_url: str = ""  # redis://host:6379/0: the distributed mode (Celery); empty: the embedded mode
    # a task unacknowledged this long is delivered again: how long a killed worker's tasks wait, and a bound every
    # task (and every countdown, e.g. a webhook retry's) must stay under, or it is delivered twice while it waits
    broker_visibility_timeout_s: float = 3600.0
    # an unfinished document whose rows have not moved this long is taken for lost and sent again (the reaper);
    # above the longest queue wait expected, or waiting documents are sent twice (harmless, wasted work)
    reap_after_s: float = 900.0
    reap_interval_s: float = 60.0  # how often the embedded service, or one of the workers, looks for such documents
    cpu_threads: int = 2  # embedded mode: threads for ingest, render and layout
    # recognize tasks in flight at once, all feeding the one engine (embedded, and a GPU worker's concurrency);
    # None: as many as fill the engine's batch (pipeline/engine_settings.py, gpu_threads)
    gpu_threads: PositiveInt | None = None
    log_format: Literal["json", "text"] = "json"  # `quire serve` / `quire worker` logs: one JSON object a line
    metrics_port: int = 0  # a worker serves its engine's Prometheus metrics on this port; 0: none
    # API keys: auto = required unless `quire serve` listens on a loopback address only; required; off
    api_keys: ApiKeysMode = "auto"
    # webhooks: hosts and networks a callback URL may reach although private or loopback (comma-separated)
    webhook_allow: Annotated[list[str], NoDecode] = []
    webhook_timeout_s: float = 10.0  # one delivery attempt's connect and read timeout
    webhook_backoff_s: float = 2.0  # the first retry waits up to this, each later one up to twice the one before,
    webhook_backoff_max_s: float = 1800.0  # but never more than this (below the broker's 3600 s visibility timeout)
    webhook_retry_window_s: float = 86400.0  # no retry is scheduled past this long after the first attempt

    @field_validator("blob_url")
    @classmethod
    def _an_s3_url(cls, value: str) -> str:
        """A malformed QUIRE_BLOB_URL stops the process at start, saying why."""
        if value:
            parse_s3_url(value)
        return value

    @field_validator("webhook_allow", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """QUIRE_WEBHOOK_ALLOW=127.0.0.1,10.0.0.0/8 rather than JSON."""
        return [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _defaults_under_cache_dir(self) -> Settings:
        """The embedded mode needs no configuration: the database and blobs default to files under cache_dir,
        and a `~` in a SQLite path is expanded (SQLAlchemy would otherwise create a directory named `~`)."""
        if not self.database_url:
            self.database_url = f"sqlite:///{self.cache_dir.expanduser() / 'quire.db'}"
        elif self.database_url.startswith("sqlite:///~"):
            self.database_url = "sqlite:///" + str(Path(self.database_url.removeprefix("sqlite:///")).expanduser())
        self.blob_dir = (self.blob_dir or self.cache_dir / "blobs").expanduser()
        return self

    @property
    def tiny_checkpoint(self) -> Path:
        """Where `quire demo` writes its tiny random checkpoint, and where the hints and `quire models list` look."""
        return self.cache_dir / "tiny-checkpoint"


def get_settings() -> Settings:
    return Settings()
