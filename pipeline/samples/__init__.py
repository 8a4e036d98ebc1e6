"""Generated stand-ins for what cannot be fetched everywhere: tiny random checkpoints in the real on-disk format
and synthetic page images, for the demo, the tests and the benchmarks."""
