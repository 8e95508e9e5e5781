"""What loading and running a model can raise; the messages are meant for the user."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model file could not be loaded; the message is meant for the user."""


class DeviceMemoryError(ModelLoadError):
    """The GPU could not hold what the load asked for (llama.cpp failed to allocate a device buffer);
    a load with fewer layers or on the CPU may work."""


class DecodeError(RuntimeError):
    """llama.cpp failed to evaluate tokens (out of memory on the device, a backend error); the KV
    bookkeeping was resynced to what it holds."""


class ContextFull(RuntimeError):
    def __init__(self, needed: int, n_ctx: int):
        super().__init__(f"the conversation needs {needed} tokens but the context holds {n_ctx}")
        self.needed, self.n_ctx = needed, n_ctx


class NoVision(RuntimeError):
    """A message holds images and the model that would read it has no vision projector."""
