"""``/v1/files`` and ``/v1/batches``: the OpenAI Batch API over the batch store and runner.

Every bad input is an OpenAI-style 4xx naming the field (``param``); an unknown id is 404.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.datastructures import UploadFile
from starlette.responses import Response

from blink.gateway.auth import PRINCIPAL_STATE_KEY, ApiKey
from blink.gateway.batch.jsonl import ENDPOINTS, parse_input
from blink.gateway.batch.runner import BatchRunner, new_file_id
from blink.gateway.batch.store import BatchRecord, BatchStore, FileRecord
from blink.gateway.request_parsing import parse_json_object
from blink.protocol.errors import InvalidRequestError, NotFoundError, RequestTooLargeError
from blink.throughput_config import BatchSettings

# OpenAI's only completion window; the job itself runs as soon as capacity allows.
_WINDOW = "24h"
_WINDOW_S = 24 * 3600
# OpenAI's list page size: default 20, at most 100.
_LIST_DEFAULT, _LIST_MAX = 20, 100
# OpenAI allows 16 metadata pairs, keys up to 64 and values up to 512 characters.
_META_PAIRS, _META_KEY, _META_VALUE = 16, 64, 512


def _json(obj: object, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def file_object(rec: FileRecord) -> dict[str, Any]:
    return {"id": rec.id, "object": "file", "bytes": rec.bytes, "created_at": rec.created_at,
            "filename": rec.filename, "purpose": rec.purpose, "status": "processed", "status_details": None}


def batch_object(b: BatchRecord) -> dict[str, Any]:
    return {
        "id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": b.errors,
        "input_file_id": b.input_file_id, "completion_window": b.completion_window, "status": b.status,
        "output_file_id": b.output_file_id, "error_file_id": b.error_file_id, "created_at": b.created_at,
        "in_progress_at": b.in_progress_at, "expires_at": b.expires_at, "finalizing_at": b.finalizing_at,
        "completed_at": b.completed_at, "failed_at": b.failed_at, "expired_at": None,
        "cancelling_at": b.cancelling_at, "cancelled_at": b.cancelled_at,
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "metadata": b.metadata,
    }


def build_batch_router(store: BatchStore, runner: BatchRunner, settings: BatchSettings) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/files")
    async def upload_file(request: Request) -> Response:
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise InvalidRequestError("Upload a file as multipart/form-data with fields 'file' and 'purpose'.",
                                      param="file", code="invalid_content_type")
        async with request.form(max_files=1, max_fields=4) as form:
            purpose = form.get("purpose")
            upload = form.get("file")
            if purpose != "batch":
                raise InvalidRequestError(f"'purpose' must be 'batch', got {purpose!r}.", param="purpose",
                                          code="invalid_value")
            if not isinstance(upload, UploadFile):
                raise InvalidRequestError("Missing the 'file' part.", param="file", code="missing_required_parameter")
            content = await upload.read(settings.max_file_bytes + 1)
            filename = upload.filename or "upload.jsonl"
        if len(content) > settings.max_file_bytes:
            raise RequestTooLargeError(f"The file exceeds the limit of {settings.max_file_bytes} bytes.",
                                       param="file")
        if not content.strip():
            raise InvalidRequestError("The file is empty.", param="file", code="empty_file")
        rec = FileRecord(new_file_id(), purpose, filename, len(content), int(time.time()))
        await store.put_file(rec, content)
        return _json(file_object(rec))

    @router.get("/v1/files/{file_id}")
    async def get_file(file_id: str) -> Response:
        rec = await store.get_file(file_id)
        if rec is None:
            raise NotFoundError(f"No such file: {file_id!r}.", param="file_id")
        return _json(file_object(rec))

    @router.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str) -> Response:
        content = await store.file_content(file_id)
        if content is None:
            raise NotFoundError(f"No such file: {file_id!r}.", param="file_id")
        return Response(content, media_type="application/jsonl")

    @router.post("/v1/batches")
    async def create_batch(request: Request) -> Response:
        body = parse_json_object(await request.body())
        input_file_id = _required_str(body, "input_file_id")
        endpoint = _required_str(body, "endpoint")
        if endpoint not in ENDPOINTS:
            raise InvalidRequestError(f"'endpoint' must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}.",
                                      param="endpoint", code="invalid_value")
        window = body.get("completion_window", _WINDOW)
        if window != _WINDOW:
            raise InvalidRequestError(f"'completion_window' must be '{_WINDOW}'.", param="completion_window",
                                      code="invalid_value")
        metadata = _metadata(body.get("metadata"))
        unknown = set(body) - {"input_file_id", "endpoint", "completion_window", "metadata"}
        if unknown:
            name = sorted(unknown)[0]
            raise InvalidRequestError(f"Unrecognized request argument supplied: {name}", param=name,
                                      code="unknown_parameter")
        file = await store.get_file(input_file_id)
        if file is None:
            raise NotFoundError(f"No such file: {input_file_id!r}.", param="input_file_id")
        if file.purpose != "batch":
            raise InvalidRequestError(f"File {input_file_id!r} has purpose {file.purpose!r}, not 'batch'.",
                                      param="input_file_id", code="invalid_value")
        content = await store.file_content(input_file_id) or b""
        lines = parse_input(content, endpoint)
        if not lines:
            raise InvalidRequestError("The input file has no requests.", param="input_file_id", code="empty_file")
        if len(lines) > settings.max_lines:
            raise InvalidRequestError(f"The input file has {len(lines)} requests; the limit is {settings.max_lines}.",
                                      param="input_file_id", code="too_many_requests")
        key: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
        now = int(time.time())
        rec = BatchRecord(id=_new_batch_id(), input_file_id=input_file_id, endpoint=endpoint,
                          completion_window=_WINDOW, status="validating", created_at=now, metadata=metadata,
                          key_id=key.key_id if key else None, expires_at=now + _WINDOW_S)
        await store.create_batch(rec, lines)
        runner.notify()
        created = await store.get_batch(rec.id)
        return _json(batch_object(created or rec))

    @router.get("/v1/batches/{batch_id}")
    async def get_batch(batch_id: str) -> Response:
        return _json(batch_object(await _batch(store, batch_id)))

    @router.get("/v1/batches")
    async def list_batches(request: Request) -> Response:
        after = request.query_params.get("after")
        limit_raw = request.query_params.get("limit", str(_LIST_DEFAULT))
        if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= _LIST_MAX:
            raise InvalidRequestError(f"'limit' must be an integer from 1 to {_LIST_MAX}.", param="limit",
                                      code="invalid_value")
        if after is not None:
            await _batch(store, after)
        page = await store.list_batches(after, int(limit_raw) + 1)
        has_more = len(page) > int(limit_raw)
        data = [batch_object(b) for b in page[: int(limit_raw)]]
        return _json({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None, "has_more": has_more})

    @router.post("/v1/batches/{batch_id}/cancel")
    async def cancel_batch(batch_id: str) -> Response:
        batch = await _batch(store, batch_id)
        if batch.status in ("validating", "in_progress"):
            await store.set_status(batch_id, "cancelling", "cancelling_at", only_from=("validating", "in_progress"))
            runner.cancel(batch_id)
        elif batch.status not in ("cancelling", "cancelled"):
            raise InvalidRequestError(f"Cannot cancel a batch that is {batch.status}.", param="batch_id",
                                      code="invalid_state")
        return _json(batch_object(await _batch(store, batch_id)))

    return router


async def _batch(store: BatchStore, batch_id: str) -> BatchRecord:
    rec = await store.get_batch(batch_id)
    if rec is None:
        raise NotFoundError(f"No such batch: {batch_id!r}.", param="batch_id")
    return rec


def _new_batch_id() -> str:
    """Time-ordered (creation nanoseconds first), so newest-first listing is exact within a second."""
    return f"batch_{time.time_ns():016x}{uuid.uuid4().hex[:16]}"


def _required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if value is None:
        raise InvalidRequestError(f"Missing required parameter: '{name}'.", param=name,
                                  code="missing_required_parameter")
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"'{name}' must be a non-empty string.", param=name, code="invalid_type")
    return value


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    ok = isinstance(value, dict) and len(value) <= _META_PAIRS and all(
        isinstance(k, str) and isinstance(v, str) and len(k) <= _META_KEY and len(v) <= _META_VALUE
        for k, v in value.items())
    if not ok:
        raise InvalidRequestError(
            f"'metadata' must be an object of at most {_META_PAIRS} string pairs (keys ≤ {_META_KEY}, "
            f"values ≤ {_META_VALUE} characters).", param="metadata", code="invalid_value")
    return dict(value)
