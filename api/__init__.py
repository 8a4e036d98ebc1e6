"""The FastAPI upload-and-poll service in front of the pipeline (see DESIGN.md, data flow)."""
