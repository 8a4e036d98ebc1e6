"""Ways to reach the engine from outside the process: the OpenAI-compatible HTTP server."""
