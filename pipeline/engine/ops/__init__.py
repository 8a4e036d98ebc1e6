"""The engine's kernels and their Python faces: the Triton attention kernels, the C++ CPU extension (csrc/) and what
builds, binds and calls them. Nothing here imports the rest of the engine, so the model may import it."""
