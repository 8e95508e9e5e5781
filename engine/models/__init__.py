"""Facts about model files, read without loading them: the catalog, GGUF metadata, devices, KV and
weight bytes, the VRAM planner, and downloads. Nothing here imports llama_cpp."""
