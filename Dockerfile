# One image for every Quire process: docker-compose.yml runs it as the migration, the API and the CPU and GPU
# workers, each with its own `quire` command. torch from PyPI carries its CUDA libraries, so the same image runs
# the GPU worker under the NVIDIA container runtime and the rest on CPUs.
FROM python:3.11-slim

# g++: torch compiles the CPU paged-decode kernel (pipeline/engine/ops/csrc) the first time a CPU engine starts.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY pipeline pipeline
COPY workers workers
COPY api api
COPY migrations migrations
# Editable, as in a checkout: `quire migrate` finds migrations/ beside the package (pipeline/db/migrate.py); with
# the S3 client, for blobs in a bucket (QUIRE_BLOB_URL).
RUN pip install --no-cache-dir -e '.[s3]'

RUN useradd --create-home --uid 1000 quire \
    && mkdir -p /data/blobs /data/cache /models \
    && chown -R quire /data /models
USER quire
ENV PYTHONUNBUFFERED=1 QUIRE_BLOB_DIR=/data/blobs QUIRE_CACHE_DIR=/data/cache HF_HOME=/models/huggingface
# `docker build --build-arg QUIRE_PULL_MODELS=1 .` bakes the recognition and layout weights (~2 GB) into the image's
# Hugging Face cache, checked as `quire models pull` checks them; by default workers fetch them on first start.
ARG QUIRE_PULL_MODELS=0
RUN if [ "$QUIRE_PULL_MODELS" = 1 ]; then quire models pull; fi
EXPOSE 8080
ENTRYPOINT ["quire"]
CMD ["serve", "--host", "0.0.0.0"]
