"""The Batch API's JSONL formats: input lines in, output and error lines out (OpenAI's shapes).

A malformed line (bad JSON, no ``custom_id``, wrong ``method``/``url``, a ``body`` that is not
an object, a repeated ``custom_id``) becomes that line's error, never the whole batch's.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from blink.gateway.batch.store import NewLine

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")


def parse_input(content: bytes, endpoint: str) -> list[NewLine]:
    """One ``NewLine`` per non-blank line, in file order."""
    lines: list[NewLine] = []
    seen: set[str] = set()
    for raw in content.splitlines():
        if not raw.strip():
            continue
        line = _parse_line(raw, len(lines), endpoint, seen)
        if line.error is not None:  # stored as its final error-file line
            line.error = error_line(line.custom_id, line.error)
        lines.append(line)
    return lines


def _parse_line(raw: bytes, index: int, endpoint: str, seen: set[str]) -> NewLine:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return NewLine(index, None, error=_error("invalid_json", f"Line {index + 1} is not valid JSON: {exc}"))
    if not isinstance(obj, dict):
        return NewLine(index, None, error=_error("invalid_request", f"Line {index + 1} must be a JSON object."))
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return NewLine(index, None, error=_error("missing_custom_id",
                                                 f"Line {index + 1} needs a non-empty string 'custom_id'."))
    if custom_id in seen:
        return NewLine(index, custom_id, error=_error("duplicate_custom_id",
                                                      f"custom_id {custom_id!r} appears more than once."))
    seen.add(custom_id)
    method = obj.get("method", "POST")
    if not isinstance(method, str) or method.upper() != "POST":
        return NewLine(index, custom_id, error=_error("invalid_method", "'method' must be 'POST'."))
    url = obj.get("url", endpoint)
    if url != endpoint:
        return NewLine(index, custom_id, error=_error(
            "invalid_url", f"'url' is {url!r}, but this batch's endpoint is {endpoint!r}."))
    body = obj.get("body")
    if not isinstance(body, dict):
        return NewLine(index, custom_id, error=_error("invalid_body", "'body' must be a JSON object."))
    return NewLine(index, custom_id, body=body)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


def line_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def output_line(custom_id: str | None, status: int, request_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """A line of the output file (status 200) or of the error file (a request that failed)."""
    return {
        "id": line_id(),
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }


def error_line(custom_id: str | None, error: dict[str, Any]) -> dict[str, Any]:
    """A line of the error file for an input line that could not be run at all."""
    return {"id": line_id(), "custom_id": custom_id, "response": None, "error": error}
