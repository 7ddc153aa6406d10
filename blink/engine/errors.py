"""Engine errors. The engine never imports the protocol layer; backends map these."""

from __future__ import annotations


class EngineError(Exception):
    """Base class for everything the engine raises on purpose."""


class InvalidParameterError(EngineError, ValueError):
    """A sampling parameter or request field is out of range; ``param`` names it."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptTooLongError(InvalidParameterError):
    """Prompt (+ requested tokens) exceeds the model's context length."""


class RequestFailedError(EngineError):
    """The engine stopped one request after an internal failure; other requests carry on."""


class UnsupportedModelError(EngineError):
    """The checkpoint's architecture is not in the registry."""


class EngineDeadError(EngineError):
    """The engine-core process died; every in-flight request fails with this."""


class ModelNotAvailableError(EngineError):
    """The model id or path cannot be resolved to a local checkpoint (missing, offline, gated)."""


class ModelLoadError(EngineError):
    """The checkpoint was found but cannot be loaded (no safetensors, missing or misshapen weights)."""


class KVCacheTooSmallError(EngineError):
    """``kv_cache_memory_bytes`` does not fit a single KV block for this model."""
