"""Running models: the one llama_cpp owner (backend), chat templates, the streaming loop, one
thread per loaded model (runtime) and which models are loaded (manager); the remote L3 client."""
