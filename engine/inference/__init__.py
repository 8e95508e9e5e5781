"""Running models: the one seam to llama.cpp (llama_seam), a loaded model (backend, vocab), chat
templates, the streaming loop, one thread per loaded model (runtime) and which models are loaded
(manager); the remote L3 client."""
