"""The service's work on documents, independent of HTTP and of Celery: options, stages, dispatch."""
