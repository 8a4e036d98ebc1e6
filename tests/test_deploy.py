"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the stack is the distributed mode
(Postgres, Redis, a one-shot migration, the API, a CPU and a GPU worker), every process runs a command the `quire`
CLI accepts, every QUIRE_* variable is a Settings field with a valid value, nothing starts before the schema is
migrated, the GPU worker gets an NVIDIA GPU and a kept model cache, and the API and the workers share one blob
store: a volume, or with the `s3` profile a MinIO bucket."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import build_parser
from pipeline.config import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
QUIRE = {"migrate": ["migrate"], "api": ["serve"], "worker-cpu": ["worker"], "worker-gpu": ["worker"]}
S3_PROFILE = {"minio", "s3-bucket"}
_DEFAULTED = re.compile(r"\$\{(\w+):-([^}]*)\}")  # compose's ${NAME:-default}
AFTER_MIGRATION = ("api", "worker-cpu", "worker-gpu")


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined and comments left out."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def instruction(name: str) -> list[str]:
    return [arguments for found, arguments in dockerfile() if found == name]


def image_environment() -> dict[str, str]:
    pairs = " ".join(instruction("ENV")).split()
    return dict(pair.split("=", 1) for pair in pairs)


def argv(service: str) -> list[str]:
    """The process a service runs: the image's ENTRYPOINT followed by the service's command."""
    return json.loads(instruction("ENTRYPOINT")[-1]) + SERVICES[service]["command"]


def parse(arguments: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(arguments)
    except SystemExit:
        pytest.fail(f"`quire` refuses {arguments}")


def environment(service: str, shell: dict[str, str] | None = None) -> dict[str, str]:
    """What the service's process sees: the image's ENV overlaid with the service's environment, ${NAME:-default}
    taken from shell (the environment `docker compose` runs in) as compose does."""
    def interpolated(value: object) -> str:
        return _DEFAULTED.sub(lambda found: (shell or {}).get(found[1]) or found[2], str(value))

    return image_environment() | {key: interpolated(value)
                                  for key, value in SERVICES[service].get("environment", {}).items()}


def mounts(service: str) -> dict[str, str]:
    """Mount target → named volume or host path."""
    return {entry.split(":")[1]: entry.split(":")[0] for entry in SERVICES[service].get("volumes", [])}


def test_the_stack_is_the_distributed_mode() -> None:
    assert set(SERVICES) == {"postgres", "redis", *QUIRE, *S3_PROFILE}
    assert SERVICES["postgres"]["image"].startswith("postgres:") and SERVICES["redis"]["image"].startswith("redis:")
    for name in QUIRE:
        assert SERVICES[name]["build"] == "." and SERVICES[name]["image"] == "quire"


@pytest.mark.parametrize("service", QUIRE)
def test_every_quire_service_runs_a_real_quire_command(service: str) -> None:
    program, *arguments = argv(service)
    assert program == "quire"
    assert [parse(arguments).command] == QUIRE[service]


def test_the_api_listens_for_other_containers_and_the_workers_take_their_queues() -> None:
    api = parse(argv("api")[1:])
    assert (api.host, api.port) == ("0.0.0.0", 8080) and "8080:8080" in SERVICES["api"]["ports"]
    assert parse(argv("worker-cpu")[1:]).queues == "cpu" and parse(argv("worker-gpu")[1:]).queues == "gpu"


@pytest.mark.parametrize("service", QUIRE)
def test_every_quire_variable_is_a_setting_with_a_valid_value(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    variables = {key: value for key, value in environment(service).items() if key.startswith("QUIRE_")}
    unknown = {key for key in variables if key.removeprefix("QUIRE_").lower() not in Settings.model_fields}
    assert not unknown, f"{service} sets variables Settings does not read: {sorted(unknown)}"
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    settings = Settings(_env_file=None)
    assert settings.database_url == "postgresql+psycopg://quire:quire@postgres:5432/quire"
    postgres = SERVICES["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"]) == ("quire",) * 3
    assert settings.broker_url.startswith("redis://redis:6379/")


def test_nothing_starts_before_the_schema_is_migrated() -> None:
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert SERVICES["migrate"]["restart"] == "no"  # one-shot: a finished migration is not started again
    assert "healthcheck" in SERVICES["postgres"] and "healthcheck" in SERVICES["redis"]
    for service in AFTER_MIGRATION:
        depends_on = SERVICES[service]["depends_on"]
        assert depends_on["migrate"]["condition"] == "service_completed_successfully"
        assert depends_on["redis"]["condition"] == "service_healthy"


def settings_of(service: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The Settings the service's process reads from its environment."""
    for key in [key for key in os.environ if key.startswith("QUIRE_")]:
        monkeypatch.delenv(key)
    for key, value in environment(service).items():
        monkeypatch.setenv(key, value)
    return Settings(_env_file=None)


def test_the_gpu_worker_gets_an_nvidia_gpu_and_a_kept_model_cache() -> None:
    devices = SERVICES["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(device["driver"] == "nvidia" and "gpu" in device["capabilities"] for device in devices)
    env = environment("worker-gpu")
    cache = next(volume for target, volume in mounts("worker-gpu").items()
                 if Path(env["HF_HOME"]).is_relative_to(target))
    assert cache in COMPOSE["volumes"]  # a named volume: downloads survive the container


@pytest.mark.parametrize("service", ["worker-gpu", "worker-cpu"])
def test_the_workers_leave_device_dtype_batch_and_threads_to_the_auto_defaults(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`auto` is CUDA and bf16 where the container sees the GPU (only the GPU worker reserves one) and the CPU
    elsewhere; the batch and the GPU worker's threads then follow the device."""
    settings = settings_of(service, monkeypatch)
    assert (settings.device, settings.dtype, settings.layout_device) == ("auto", "auto", "")
    assert (settings.max_num_seqs, settings.gpu_threads, settings.kv_cache_memory) == (None, None, None)
    assert ("deploy" in SERVICES[service]) == (service == "worker-gpu")


def test_the_api_and_the_workers_share_one_blob_volume() -> None:
    shared = {(environment(service)["QUIRE_BLOB_DIR"], mounts(service).get(environment(service)["QUIRE_BLOB_DIR"]))
              for service in AFTER_MIGRATION}
    assert len(shared) == 1
    (_, volume), = shared
    assert volume in COMPOSE["volumes"]


def test_the_s3_profile_adds_a_bucket_that_the_api_and_the_workers_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """`QUIRE_BLOB_URL=s3://quire/blobs docker compose --profile s3 up`: MinIO and a one-shot job that makes the
    bucket start only with the profile; the Quire services wait for the bucket when it is there and reach MinIO by
    its service name with its root keys; without QUIRE_BLOB_URL they keep the volume."""
    assert all(SERVICES[name]["profiles"] == ["s3"] for name in S3_PROFILE)
    assert all("profiles" not in SERVICES[name] for name in set(SERVICES) - S3_PROFILE)
    minio = environment("minio")
    for service in AFTER_MIGRATION:
        assert SERVICES[service]["depends_on"]["s3-bucket"] == {"condition": "service_completed_successfully",
                                                                 "required": False}
        assert environment(service)["QUIRE_BLOB_URL"] == ""
        env = environment(service, {"QUIRE_BLOB_URL": "s3://quire/blobs"})
        assert (env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
            "http://minio:9000", minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"])
        for key in [key for key in os.environ if key.startswith("QUIRE_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("QUIRE_BLOB_URL", env["QUIRE_BLOB_URL"])
        assert Settings(_env_file=None).blob_url == "s3://quire/blobs"
    assert environment("s3-bucket")["QUIRE_BLOB_URL"] == "s3://quire"  # the bucket it makes: quire unless set
    assert "mc mb --ignore-existing" in SERVICES["s3-bucket"]["command"][0]
    assert "s3data" in COMPOSE["volumes"] and mounts("minio") == {"/data": "s3data"}


def test_the_image_can_bake_the_weights_in_with_quire_models_pull() -> None:
    assert "QUIRE_PULL_MODELS=0" in instruction("ARG")  # off unless the build asks
    pull = next(arguments for arguments in instruction("RUN") if "QUIRE_PULL_MODELS" in arguments)
    command = re.search(r"then (quire [^;]+);", pull).group(1).split()
    assert command[0] == "quire" and parse(command[1:]).models_command == "pull"
    names = [name for name, _ in dockerfile()]
    assert names.index("RUN", names.index("ARG")) > names.index("USER")  # into the quire user's HF_HOME


def test_the_image_installs_the_project_and_runs_quire() -> None:
    copied = {source for arguments in instruction("COPY") for source in arguments.split()[:-1]}
    assert {"pyproject.toml", "README.md", "pipeline", "workers", "api", "migrations"} <= copied
    assert any(re.search(r"pip install .*-e '\.\[s3\]'(\s|$)", arguments) for arguments in instruction("RUN")), \
        "editable (migrations/ is found beside the installed package), with the S3 client for QUIRE_BLOB_URL"
    assert json.loads(instruction("ENTRYPOINT")[-1]) == ["quire"]
    assert parse(json.loads(instruction("CMD")[-1])).command == "serve"
