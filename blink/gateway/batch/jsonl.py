"""The Batch API's JSONL formats: input lines in, output and error lines out (OpenAI's shapes).

A malformed line (bad JSON, no ``custom_id``, wrong ``method``/``url``, a ``body`` that is not
an object, a repeated ``custom_id``) becomes that line's error, never the whole batch's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from blink.gateway.batch.store import NewLine
from blink.protocol.errors import InvalidRequestError

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")


def parse_lines(chunks: Iterable[bytes], endpoint: str, max_lines: int | None = None) -> Iterator[NewLine]:
    """One ``NewLine`` per non-blank line, in file order, from a file read in chunks (one line in
    memory at a time).

    Raises ``InvalidRequestError`` (param ``input_file_id``) for a file with no requests or with
    more than ``max_lines``, as soon as it can tell.
    """
    seen: set[str] = set()
    count = 0
    for raw in iter_lines(chunks):
        if not raw.strip():
            continue
        if max_lines is not None and count >= max_lines:
            raise InvalidRequestError(f"The input file has more than {max_lines} requests; the limit is {max_lines}.",
                                      param="input_file_id", code="too_many_requests")
        line = _parse_line(raw, count, endpoint, seen)
        if line.error is not None:  # stored as its final error-file line
            line.error = error_line(line.custom_id, line.error)
        count += 1
        yield line
    if count == 0:
        raise InvalidRequestError("The input file has no requests.", param="input_file_id", code="empty_file")


def iter_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a byte stream split at ``\\n`` (a trailing ``\\r`` dropped), across chunk edges.

    A line longer than a chunk is gathered as pieces and joined once, not re-copied per chunk.
    """
    pending: list[bytes] = []
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending.append(chunk[start:end])
            yield b"".join(pending).removesuffix(b"\r")
            pending = []
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending).removesuffix(b"\r")


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
