"""``/v1/responses``: create (through the generation pipeline), retrieve, delete, list input items.

A stored response belongs to the API key that created it, exactly like a batch object
(``batch/access.py``): another key, even of the same tenant, gets the 404 of an id that does not
exist (for ``GET``, ``DELETE``, ``input_items`` and as a ``previous_response_id``); a key with the
``admin`` scope reaches every one; with auth off everything belongs to one anonymous owner.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from blink.backends.base import Delta, GenerationRequest, with_middleware
from blink.config.responses import ResponsesSettings
from blink.config.server import ServerSettings
from blink.gateway.auth.keys import PRINCIPAL_STATE_KEY, ApiKey
from blink.gateway.batch.access import Caller, caller_of
from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.replay import cached_deltas
from blink.gateway.chat.request_mapping import apply_routing_headers
from blink.gateway.front import GatewayFront
from blink.gateway.http.dispatch import Routes
from blink.gateway.http.json_response import json_response
from blink.gateway.http.request_parsing import bounded_int, parse_json_object, require_json, validate
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.rendering.error_params import renamed, renaming_params
from blink.gateway.rendering.generation_response import GenerationResponse
from blink.gateway.responses.errors import responses_param
from blink.gateway.responses.http_response import ResponsesWire
from blink.gateway.responses.render import ResponseRenderer
from blink.gateway.responses.store import ResponseStore, StoredResponse
from blink.gateway.responses.translate import translate
from blink.obs import annotate, lap
from blink.protocol.errors import BlinkError, InvalidRequestError, NotFoundError
from blink.protocol.responses import ResponsesRequest

# OpenAI's page size bounds for list endpoints.
_MAX_PAGE = 100
_DEFAULT_PAGE = 20


class _Replay:
    """A cache hit as a ``StreamSource``: the same deltas a live backend would have sent."""

    name = "cache"

    def __init__(self, entry: CachedResponse) -> None:
        self._entry = entry

    async def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        for delta in cached_deltas(self._entry):
            yield delta



def _not_found(response_id: str, param: str = "response_id") -> NotFoundError:
    return NotFoundError(f"No response found with id {response_id[:80]!r}.", param=param)


def build_responses_router(store: ResponseStore, settings: ResponsesSettings, server: ServerSettings) -> Routes:
    router = Routes()

    async def owned(caller: Caller, response_id: str) -> StoredResponse:
        rec = await store.get(response_id)
        if rec is None or not caller.may_access(rec.key_id):
            raise _not_found(response_id)
        return rec

    async def history(caller: Caller, previous_id: str) -> list[dict[str, Any]]:
        """The conversation ``previous_id`` ends: every turn's input items and output, oldest first."""
        chain = await store.chain(previous_id, settings.max_chain)
        if not chain or not caller.may_access(chain[-1].key_id):
            raise NotFoundError(f"Previous response with id {previous_id[:80]!r} not found (or an earlier turn of "
                                "its conversation was deleted or expired).", param="previous_response_id")
        items: list[dict[str, Any]] = []
        for turn in chain:
            items += turn.input_items
            items += turn.response.get("output") or []
        return items

    async def save(caller: Caller, previous_id: str | None, items: list[dict[str, Any]],
                   response: dict[str, Any]) -> bool:
        rec = StoredResponse(response["id"], caller.key_id, caller.tenant, items, response, previous_id,
                             int(time.time()) + settings.ttl_s)
        return await store.put(rec, settings.storage_budget_bytes)

    @router.post("/v1/responses")
    async def create_response(request: Request) -> Response:
        t0 = time.perf_counter()
        principal: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
        if principal is not None:
            annotate(key_id=principal.key_id)
        require_json(request.headers.get("content-type"))
        raw = parse_json_object(await request.body())
        cache = GatewayFront.directives(raw, request.headers)
        body = validate(ResponsesRequest, raw)
        lap("parse")
        state = request.app.state
        pipeline: GenerationPipeline = state.pipeline
        model = body.model or pipeline.registry.default_model()
        caller = caller_of(request)
        past = await history(caller, body.previous_response_id) if body.previous_response_id else []
        try:
            t = translate(body, raw, model, past, server.max_tokens_limit, server.request_timeout_s)
            req = apply_routing_headers(t.request, request.headers)
            gen = await pipeline.run(principal, req, Directives(cache))
        except BlinkError as err:
            renamed(err, responses_param)  # named as the client sent it (rendering/error_params.py)
            raise
        renderer = ResponseRenderer(req.request_id, model, body, body.tools or [], body.tool_choice or "auto")
        stored = partial(save, caller, body.previous_response_id, t.input_items) if body.store is not False else None
        return GenerationResponse(
            with_middleware(gen.source, renaming_params(responses_param)) if gen.replay is None else _Replay(gen.replay), req,
            stream=bool(body.stream), include_usage=False, t0=t0, metrics=state.metrics,
            timeout_s=server.request_timeout_s, on_complete=gen.on_complete, on_abandon=gen.on_abandon, extra_headers=gen.headers,
            usage_headers=gen.usage_headers, on_close=gen.close, wire=ResponsesWire(renderer, stored),
        )

    @router.get("/v1/responses/{response_id}")
    async def retrieve_response(request: Request) -> Response:
        response_id: str = request.path_params["response_id"]
        q = request.query_params
        if q.get("stream") not in (None, "false"):
            raise InvalidRequestError("'stream' is not supported when retrieving a response (responses are never "
                                      "run in the background here).", param="stream", code="unsupported_parameter")
        _refuse_include(request)
        rec = await owned(caller_of(request), response_id)
        return json_response(rec.response)

    @router.delete("/v1/responses/{response_id}")
    async def delete_response(request: Request) -> Response:
        response_id: str = request.path_params["response_id"]
        await owned(caller_of(request), response_id)
        await store.delete(response_id)
        return json_response({"id": response_id, "object": "response", "deleted": True})

    @router.get("/v1/responses/{response_id}/input_items")
    async def list_input_items(request: Request) -> Response:
        response_id: str = request.path_params["response_id"]
        _refuse_include(request)
        rec = await owned(caller_of(request), response_id)
        limit, order, after = _page(request)
        items = rec.input_items if order == "asc" else rec.input_items[::-1]
        if after is not None:
            ids = [i["id"] for i in items]
            if after not in ids:
                raise InvalidRequestError(f"'after' {after[:80]!r} is not an item of this response.", param="after",
                                          code="invalid_value")
            items = items[ids.index(after) + 1:]
        page = items[:limit]
        return json_response({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                              "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})

    return router


def _refuse_include(request: Request) -> None:
    if request.query_params.getlist("include") or request.query_params.getlist("include[]"):
        raise InvalidRequestError("'include' is not supported: this server produces none of the optional data.",
                                  param="include", code="unsupported_parameter")


def _page(request: Request) -> tuple[int, str, str | None]:
    q = request.query_params
    limit = bounded_int(q.get("limit", str(_DEFAULT_PAGE)), 1, _MAX_PAGE)
    if limit is None:
        raise InvalidRequestError(f"'limit' must be an integer from 1 to {_MAX_PAGE}.", param="limit",
                                  code="invalid_value")
    order = q.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequestError("'order' must be 'asc' or 'desc'.", param="order", code="invalid_value")
    return limit, order, q.get("after")
