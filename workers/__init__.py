"""What runs the service's stages: Celery tasks on the CPU and GPU workers, or the embedded mode's thread pools, and
a GPU worker's resident engine (docs/architecture.md: the service's stages)."""
