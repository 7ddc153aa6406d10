"""``/v1/files`` and ``/v1/batches``: the OpenAI Batch API over the batch store and runner.

Every bad input is an OpenAI-style 4xx naming the field (``param``); an unknown id, and an id
the caller may not see (``access.py``), is 404. An upload is spooled to disk by the multipart
parser and checked and stored from there on a worker thread, so a large file neither blocks the
event loop nor sits in memory; an oversize one is refused by its ``content-length`` first.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, BinaryIO

from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from blink.config.batch import BatchSettings
from blink.gateway.batch.access import Caller, caller_of
from blink.gateway.batch.jsonl import ENDPOINTS, iter_lines, parse_lines
from blink.gateway.batch.runner import STORED_ID_BYTES, BatchRunner, new_file_id
from blink.gateway.batch.store import CHUNK_BYTES, BatchRecord, BatchStore, FileRecord, StorageQuotaExceeded
from blink.gateway.http.dispatch import Routes
from blink.gateway.http.json_response import json_response
from blink.gateway.http.request_parsing import bounded_int, parse_json_object, require_json
from blink.protocol.errors import InvalidRequestError, NotFoundError, RequestTooLargeError

# OpenAI's only completion window; the job itself runs as soon as capacity allows.
_WINDOW = "24h"
_WINDOW_S = 24 * 3600
# OpenAI's list page sizes: batches default 20, at most 100; files default and at most 10,000.
_LIST_DEFAULT, _LIST_MAX = 20, 100
_FILES_LIST_MAX = 10_000
# OpenAI allows 16 metadata pairs, keys up to 64 and values up to 512 characters.
_META_PAIRS, _META_KEY, _META_VALUE = 16, 64, 512
# The form fields an upload may carry (``expires_after`` as the openai client encodes it).
_UPLOAD_FIELDS = frozenset({"file", "purpose", "expires_after[anchor]", "expires_after[seconds]"})



def file_object(rec: FileRecord) -> dict[str, Any]:
    return {"id": rec.id, "object": "file", "bytes": rec.bytes, "created_at": rec.created_at,
            "expires_at": rec.expires_at, "filename": rec.filename, "purpose": rec.purpose,
            "status": "processed", "status_details": None}


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


def build_batch_router(store: BatchStore, runner: BatchRunner, settings: BatchSettings) -> Routes:
    router = Routes()

    @router.post("/v1/files")
    async def upload_file(request: Request) -> Response:
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise InvalidRequestError("Upload a file as multipart/form-data with fields 'file' and 'purpose'.",
                                      param="file", code="invalid_content_type")
        caller = caller_of(request)
        try:
            async with request.form(max_files=1, max_fields=len(_UPLOAD_FIELDS)) as form:
                unknown = sorted(set(form.keys()) - _UPLOAD_FIELDS)
                if unknown:
                    raise InvalidRequestError(f"Unrecognized request argument supplied: {unknown[0]}",
                                              param=unknown[0], code="unknown_parameter")
                purpose = form.get("purpose")
                upload = form.get("file")
                if purpose != "batch":
                    raise InvalidRequestError(f"'purpose' must be 'batch', got {purpose!r}.", param="purpose",
                                              code="invalid_value")
                if not isinstance(upload, UploadFile):
                    raise InvalidRequestError("Missing the 'file' part.", param="file", code="missing_required_parameter")
                now = int(time.time())
                expires_at = _expiry(form, now, settings)
                size = await asyncio.to_thread(_checked_size, upload.file, settings)
                rec = FileRecord(new_file_id(), purpose, upload.filename or "upload.jsonl", size, now,
                                 caller.key_id, caller.tenant, expires_at)
                try:
                    await store.put_file(rec, upload.file, settings.storage_quota_bytes)
                except StorageQuotaExceeded as exc:
                    raise RequestTooLargeError(
                        f"Storing this file ({size} bytes) would exceed your storage quota: {exc.used} of "
                        f"{exc.quota} bytes are in use. Delete files (DELETE /v1/files/{{file_id}}) or let them "
                        "expire.", param="file", code="storage_quota_exceeded") from None
        except HTTPException as exc:  # Starlette's multipart parser: no boundary, too many parts, bad part headers
            raise InvalidRequestError(f"The multipart body could not be read: {exc.detail}", param="file",
                                      code="invalid_multipart") from None
        return json_response(file_object(rec))

    @router.get("/v1/files")
    async def list_files(request: Request) -> Response:
        q = request.query_params
        limit = _limit(q.get("limit"), _FILES_LIST_MAX, _FILES_LIST_MAX)
        order = q.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidRequestError("'order' must be 'asc' or 'desc'.", param="order", code="invalid_value")
        caller = caller_of(request)
        after = q.get("after")
        if after is not None:
            await _file(store, after, caller, param="after")
        page = await store.list_files(caller.list_filter, q.get("purpose"), after, limit + 1, order == "desc")
        data = [file_object(f) for f in page[:limit]]
        return json_response({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                              "last_id": data[-1]["id"] if data else None, "has_more": len(page) > limit})

    @router.get("/v1/files/{file_id}")
    async def get_file(request: Request) -> Response:
        return json_response(file_object(await _file(store, request.path_params["file_id"], caller_of(request))))

    @router.get("/v1/files/{file_id}/content")
    async def file_content(request: Request) -> Response:
        file_id: str = request.path_params["file_id"]
        rec = await _file(store, file_id, caller_of(request))
        return StreamingResponse(store.file_chunks(rec.id), media_type="application/jsonl",
                                 headers={"content-length": str(rec.bytes)})

    @router.delete("/v1/files/{file_id}")
    async def delete_file(request: Request) -> Response:
        file_id: str = request.path_params["file_id"]
        """A batch made from the file keeps running: its lines were copied when it was created."""
        rec = await _file(store, file_id, caller_of(request))
        if not await store.delete_file(rec.id):
            raise NotFoundError(f"No such file: {file_id!r}.", param="file_id")
        return json_response({"id": rec.id, "object": "file", "deleted": True})

    @router.post("/v1/batches")
    async def create_batch(request: Request) -> Response:
        require_json(request.headers.get("content-type"))
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
        caller = caller_of(request)
        # Only a file the caller may read: another key's file is "no such file", as on GET.
        file = await _file(store, input_file_id, caller, param="input_file_id")
        if file.purpose != "batch":
            raise InvalidRequestError(f"File {input_file_id!r} has purpose {file.purpose!r}, not 'batch'.",
                                      param="input_file_id", code="invalid_value")
        now = int(time.time())
        rec = BatchRecord(id=_new_batch_id(), input_file_id=input_file_id, endpoint=endpoint,
                          completion_window=_WINDOW, status="validating", created_at=now, metadata=metadata,
                          key_id=caller.key_id, tenant=caller.tenant, expires_at=now + _WINDOW_S)
        await store.create_batch_from_file(rec, lambda chunks: parse_lines(chunks, endpoint, settings.max_lines))
        runner.notify()
        created = await store.get_batch(rec.id)
        return json_response(batch_object(created or rec))

    @router.get("/v1/batches/{batch_id}")
    async def get_batch(request: Request) -> Response:
        batch_id: str = request.path_params["batch_id"]
        return json_response(batch_object(await _batch(store, batch_id, caller_of(request))))

    @router.get("/v1/batches")
    async def list_batches(request: Request) -> Response:
        caller = caller_of(request)
        after = request.query_params.get("after")
        limit = _limit(request.query_params.get("limit"), _LIST_DEFAULT, _LIST_MAX)
        if after is not None:
            await _batch(store, after, caller, param="after")
        page = await store.list_batches(after, limit + 1, caller.list_filter)
        data = [batch_object(b) for b in page[:limit]]
        return json_response({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                              "last_id": data[-1]["id"] if data else None, "has_more": len(page) > limit})

    @router.post("/v1/batches/{batch_id}/cancel")
    async def cancel_batch(request: Request) -> Response:
        batch_id: str = request.path_params["batch_id"]
        caller = caller_of(request)
        batch = await _batch(store, batch_id, caller)
        if batch.status in ("validating", "in_progress"):
            await store.set_status(batch_id, "cancelling", "cancelling_at", only_from=("validating", "in_progress"))
            runner.cancel(batch_id)
        elif batch.status not in ("cancelling", "cancelled"):
            raise InvalidRequestError(f"Cannot cancel a batch that is {batch.status}.", param="batch_id",
                                      code="invalid_state")
        return json_response(batch_object(await _batch(store, batch_id, caller)))

    return router


async def _batch(store: BatchStore, batch_id: str, caller: Caller, param: str = "batch_id") -> BatchRecord:
    """A batch the caller may read; otherwise the same 404 as for an id that never existed, naming
    ``param``, the request field that carried the id."""
    rec = await store.get_batch(batch_id)
    if rec is None or not caller.may_access(rec.key_id):
        raise NotFoundError(f"No such batch: {batch_id!r}.", param=param)
    return rec


async def _file(store: BatchStore, file_id: str, caller: Caller, param: str = "file_id") -> FileRecord:
    """A live file the caller may read; otherwise the same 404 as for an id that never existed."""
    rec = await store.get_file(file_id)
    if rec is None or not caller.may_access(rec.key_id):
        raise NotFoundError(f"No such file: {file_id!r}.", param=param)
    return rec


def _limit(raw: str | None, default: int, most: int) -> int:
    if raw is None:
        return default
    limit = bounded_int(raw, 1, most)
    if limit is None:
        raise InvalidRequestError(f"'limit' must be an integer from 1 to {most}.", param="limit",
                                  code="invalid_value")
    return limit


def _expiry(form: FormData, now: int, settings: BatchSettings) -> int | None:
    """``expires_after`` ({anchor: created_at, seconds: N}) as an expiry time; else the server's
    retention (None: kept until deleted)."""
    anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None if settings.file_retention_s is None else now + settings.file_retention_s
    if anchor != "created_at":
        raise InvalidRequestError("'expires_after.anchor' must be 'created_at'.", param="expires_after.anchor",
                                  code="invalid_value")
    lo, hi = settings.min_expires_after_s, settings.max_expires_after_s
    valid = bounded_int(seconds, lo, hi) if isinstance(seconds, str) else None
    if valid is None:
        raise InvalidRequestError(f"'expires_after.seconds' must be an integer from {lo} to {hi}.",
                                  param="expires_after.seconds", code="invalid_value")
    return now + valid


def _checked_size(file: BinaryIO, settings: BatchSettings) -> int:
    """The spooled upload's size, after checking it is within the size and line limits and not
    blank (runs on a worker thread: it reads the whole file once, a chunk at a time)."""
    size = file.seek(0, 2)
    if size > settings.max_file_bytes:
        raise RequestTooLargeError(f"The file exceeds the limit of {settings.max_file_bytes} bytes.", param="file")
    file.seek(0)
    count = 0
    for line in iter_lines(iter(lambda: file.read(CHUNK_BYTES), b"")):
        if line.strip():
            count += 1
            if count > settings.max_lines:
                raise InvalidRequestError(f"The file has more than {settings.max_lines} requests; the limit is "
                                          f"{settings.max_lines}.", param="file", code="too_many_requests")
    if count == 0:
        raise InvalidRequestError("The file is empty.", param="file", code="empty_file")
    file.seek(0)
    return size


def _new_batch_id() -> str:
    """Time-ordered (creation nanoseconds first), so newest-first listing is exact within a second;
    then ``STORED_ID_BYTES`` from the OS's CSPRNG (unguessable)."""
    return f"batch_{time.time_ns():016x}{secrets.token_hex(STORED_ID_BYTES)}"


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
