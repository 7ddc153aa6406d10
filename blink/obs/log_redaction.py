"""Secrets out of log lines: query-string credentials and ``Authorization`` values.

A client may send its key as ``?api_key=`` (some SDKs do), and uvicorn's access log, debug
logs of HTTP libraries and our own messages print URLs and sometimes headers. One filter on
every handler rewrites what reaches the log: the value of a credential-named query parameter
and of an ``Authorization``/``x-api-key`` header, and bearer tokens, become ``[REDACTED]``. It
rewrites the record's arguments in place (keeping their shape, which uvicorn's access formatter
unpacks) so a line is redacted whichever formatter renders it.
"""

from __future__ import annotations

import logging
import re

REDACTED = "[REDACTED]"
# Query parameters that carry credentials in the wild (OpenAI-, Google- and OAuth-style names).
_SECRET_PARAMS = ("api_key", "api-key", "apikey", "key", "token", "access_token", "id_token", "refresh_token",
                  "auth", "authorization", "password", "passwd", "secret", "client_secret", "signature", "sig",
                  "session", "code")
_NAMES = "|".join(re.escape(p) for p in _SECRET_PARAMS)
_QUERY = re.compile(rf"(?i)([?&;](?:{_NAMES})=)[^&;#\s\"']*")
_HEADER = re.compile(r"(?i)((?:authorization|proxy-authorization|x-api-key|api-key|cookie)[\"']?\s*[:=,]\s*[\"']?)"
                     r"(?:(?:bearer|basic|token)\s+)?[^\s\"',)]+")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}")


def redact_secrets(text: str) -> str:
    """``text`` with credential query values, auth header values and bearer tokens replaced."""
    if "=" in text:
        text = _QUERY.sub(r"\1" + REDACTED, text)
    text = _HEADER.sub(r"\1" + REDACTED, text)
    return _BEARER.sub(r"\1" + REDACTED, text)


def _clean(value: object) -> object:
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, bytes):
        return redact_secrets(value.decode("latin-1")).encode("latin-1")
    return value


class SecretRedactingFilter(logging.Filter):
    """Attach to handlers (a logger's own filters miss records its children propagate)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_secrets(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _clean(v) for k, v in record.args.items()}
        return True


def install_log_redaction(logger_names: tuple[str, ...] = ("", "uvicorn", "uvicorn.access", "uvicorn.error")) -> None:
    """Put one ``SecretRedactingFilter`` on every handler of these loggers (after logging is configured)."""
    redactor = SecretRedactingFilter()
    for name in logger_names:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, SecretRedactingFilter) for f in handler.filters):
                handler.addFilter(redactor)
