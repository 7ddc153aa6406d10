"""Typed errors that map one to one onto OpenAI-style error bodies.

Every failure the server reports is a ``BlinkError``: the HTTP status, ``error.type``,
``error.param`` and ``error.code`` travel with the exception so no layer has to guess.
"""

from __future__ import annotations

from typing import Any


class BlinkError(Exception):
    """Base error: carries everything an OpenAI-style error body needs."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients expect: ``{"error": {...}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequestError(BlinkError):
    """The request is well-formed JSON but asks for something impossible (400)."""

    status = 400
    type = "invalid_request_error"


class ValidationFailedError(InvalidRequestError):
    """A field has the wrong type or value (400, as OpenAI answers it)."""

    status = 400


class ContextLengthExceededError(InvalidRequestError):
    """Prompt plus requested completion does not fit the model's context window."""

    code = "context_length_exceeded"


class AuthenticationError(BlinkError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDeniedError(BlinkError):
    status = 403
    type = "permission_error"


class ModelNotFoundError(BlinkError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFoundError(BlinkError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class RequestTooLargeError(BlinkError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RequestTimeoutError(BlinkError):
    """A request head or body did not arrive in time; the connection closes after the answer."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class HeaderFieldsTooLargeError(BlinkError):
    """The request head is over the server's size or header-count limit (RFC 6585 431)."""

    status = 431
    type = "invalid_request_error"
    code = "request_header_fields_too_large"


class TooManyConnectionsError(BlinkError):
    """One client address holds more open connections than the server allows it."""

    status = 429
    type = "rate_limit_error"
    code = "too_many_connections"


class RateLimitError(BlinkError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class OverloadedError(BlinkError):
    """Too many concurrent streams or queue full: fail fast with 503 + retry-after."""

    status = 503
    type = "server_overloaded"
    code = "overloaded"


class BackendUnavailableError(BlinkError):
    """The model backend cannot be reached or is not ready."""

    status = 503
    type = "backend_unavailable"
    code = "backend_unavailable"


class UpstreamError(BlinkError):
    """The upstream returned an error we pass on (status kept when it is a client error)."""

    status = 502
    type = "upstream_error"
    code: str | None = "upstream_error"


class BackendTimeoutError(BlinkError):
    status = 504
    type = "timeout"
    code = "timeout"


class UpstreamClientError(UpstreamError):
    """An upstream 4xx passed on unchanged: its status, ``type``, ``param`` and ``code`` are kept."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code, status=status, headers=headers)
        self.code = code
        self.type = error_type or "invalid_request_error"


class StorageError(BlinkError):
    """The server's own store (files, batches, stored responses) cannot take a write: the disk is
    full (507) or not writable (503). Nothing of the request was saved (its transaction rolled back)."""

    status = 503
    type = "server_error"
    code = "storage_unavailable"


class InternalServerError(BlinkError):
    """An unexpected failure inside Blink; the traceback is logged, the client gets JSON."""

    status = 500
    type = "server_error"
    code = "internal_error"
