"""Celery glue: the CPU and GPU workers that run the pipeline (see DESIGN.md, data flow)."""
