"""The FastAPI upload-and-poll service in front of the pipeline (docs/architecture.md: an upload's path)."""
