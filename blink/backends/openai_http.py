"""Any OpenAI-compatible upstream (vLLM, SGLang, TGI, llama.cpp server, cloud APIs) as a Backend.

One keep-alive pool (``http1.Http1Pool``) per backend. Requests always stream upstream, so the
first token is passed on the moment it arrives; closing the delta iterator closes the upstream
response, which drops the connection and tells the upstream to stop.

Why our own client: it sits on every proxied request's first-token path, where httpx's pool/anyio
layers and aiohttp's request building cost several times its CPU; ``http1.py`` says why
(benchmarks/RESULTS.md, "Concurrency-1 first-token path").
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Collection
from http import HTTPStatus
from typing import Any

import orjson

from blink.backends.anthropic_stream import AnthropicStreamDecoder, deltas_from_message
from blink.backends.base import Delta, GenerationRequest, Health, Load, ModelCard
from blink.backends.http1 import Http1ConnectError, Http1Error, Http1Pool, Http1Response
from blink.backends.native_events import NativeEventDecoder, checked_deltas, event_object
from blink.backends.openai_chunks import MalformedChunk, deltas_from_chunk
from blink.backends.request_body import openai_body
from blink.backends.responses_events import ResponsesEventDecoder, deltas_from_response
from blink.backends.stream_decoder import StreamDecoder
from blink.protocol.errors import (
    BackendTimeoutError,
    BackendUnavailableError,
    BlinkError,
    InvalidRequestError,
    UpstreamClientError,
    UpstreamError,
)

# An upstream error body bigger than this is not an error message worth reading.
_MAX_ERROR_BODY = 64 * 1024
# An upstream that sent [DONE] but keeps the body open gets this long before we drop it.
_DRAIN_TIMEOUT_S = 0.5
# A health check that takes longer than this says the upstream is not healthy enough to use.
_HEALTH_TIMEOUT_S = 2.0


class OpenAIHTTPBackend:
    """Forward generation requests to ``base_url`` (the part ending in ``/v1``)."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        upstream_model: str | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 300.0,
        max_connections: int = 256,
        native_apis: Collection[str] = (),
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.upstream_model = upstream_model
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
        auth = f"authorization: Bearer {api_key}\r\n".encode("latin-1") if api_key else b""
        self._get_headers = b"accept: application/json\r\n" + auth
        self._post_headers = b"content-type: application/json\r\naccept: text/event-stream\r\n" + auth
        # APIs the upstream serves itself (``"messages"``, ``"responses"``): those requests pass
        # through in their own form instead of being translated to chat completions.
        self.native_apis = frozenset(native_apis)
        anthropic_key = f"x-api-key: {api_key}\r\n".encode("latin-1") if api_key else b""
        self._native_headers = self._post_headers + anthropic_key + b"anthropic-version: 2023-06-01\r\n"
        self._connect_timeout_s = connect_timeout_s
        # Bounds the gap between two reads, and between two events (a stall), not the whole stream.
        self._read_timeout_s = read_timeout_s
        self._max_connections = max_connections
        self._client: Http1Pool | None = None
        self._running = 0

    # -- Backend protocol ---------------------------------------------------------------------

    def models(self) -> list[ModelCard]:
        return [ModelCard(id=self.name, owned_by="upstream")]

    async def start(self) -> None:
        self._ensure_client()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def health(self) -> Health:
        resp: Http1Response | None = None
        try:
            async with asyncio.timeout(_HEALTH_TIMEOUT_S):
                resp = await self._ensure_client().request("GET", "/models", self._get_headers)
                await resp.read(_MAX_ERROR_BODY)  # read to the end: the connection stays reusable
        except (OSError, TimeoutError) as exc:  # Http1Error and Http1ConnectError are OSErrors
            return Health(ok=False, detail=f"{type(exc).__name__}: {exc}")
        finally:
            if resp is not None:
                resp.release()
        return Health(ok=resp.status == 200, detail=f"GET /models -> {resp.status}")

    def load(self) -> Load:
        return Load(running=self._running)

    async def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        _refuse_unrelayed(req)
        client = self._ensure_client()
        native = self._native(req)
        if native is not None:
            anthropic = req.native_api == "messages"
            path = "/messages" if anthropic else "/responses"
            headers = self._native_headers if anthropic else self._post_headers
            body = orjson.dumps(native)
        else:
            path = "/chat/completions" if req.kind == "chat" else "/completions"
            headers, body = self._post_headers, orjson.dumps(self._upstream_body(req))
        self._running += 1
        resp: Http1Response | None = None
        try:
            resp = await client.request("POST", path, headers, body)
            if resp.status >= 400:
                raise await _error_from_response(resp, self.name)
            if resp.headers.get("content-type", "").startswith("application/json"):
                # The upstream ignored stream=true: one whole response.
                whole = event_object(await resp.read(), self.name)
                for delta in (_native_deltas(req.native_api, whole, self.name) if native is not None
                              else _whole_deltas(whole, req.kind, self.name)):
                    yield delta
                return
            # The read loop is here, not in a generator of its own: one resume per token less.
            decoder: StreamDecoder | NativeEventDecoder = (
                _native_decoder(req.native_api, self.name) if native is not None
                else StreamDecoder(self.name, req.kind, _error_from_body))
            chunks = resp.chunks()
            loop = asyncio.get_running_loop()
            seen, progress_at = 0, loop.time()
            # Deltas with output per choice: each holds at least one token, so an upstream that sends
            # more than max_tokens of them ignores the budget (and may never stop). With ``echo`` a
            # choice's first delta is its prompt's text.
            limit, produced = req.options.max_tokens, dict[int, int]()
            if limit is not None and req.options.echo:
                limit += 1
            async for chunk in chunks:
                for delta in decoder.feed(chunk):
                    if limit is not None and (delta.text or delta.tool_calls):
                        count = produced[delta.index] = produced.get(delta.index, 0) + 1
                        if count > limit:
                            raise UpstreamError(f"upstream '{self.name}' sent more than max_tokens ({limit}) tokens")
                    yield delta
                if decoder.error is not None:
                    raise decoder.error
                if decoder.done:
                    if not resp.at_eof:  # usually the body's end came in the same read
                        await _drain(chunks)
                    return
                # Reads that bring no event (SSE comments: a proxy's keep-alives) are no progress:
                # a stalled upstream that sends them would otherwise hold the stream open forever.
                if decoder.events != seen:
                    seen, progress_at = decoder.events, loop.time()
                elif loop.time() - progress_at > self._read_timeout_s:
                    raise TimeoutError("no event within the read timeout")
            for delta in decoder.flush():
                yield delta
            if not decoder.done and not decoder.finished:
                raise UpstreamError(f"upstream '{self.name}' ended the stream before it finished")
        except Http1ConnectError as exc:
            raise BackendUnavailableError(f"upstream '{self.name}' is unreachable: {exc}") from exc
        except TimeoutError as exc:  # the connect and read timeouts
            raise BackendTimeoutError(f"upstream '{self.name}' timed out ({type(exc).__name__})") from exc
        except Http1Error as exc:  # disconnected, body cut, malformed HTTP
            raise UpstreamError(f"upstream '{self.name}' broke the connection mid-response: {exc}") from exc
        finally:
            self._running -= 1
            if resp is not None:
                resp.release()  # back to the pool if the body was read to its end, else closed

    async def count_tokens(self, req: GenerationRequest) -> int:
        """Anthropic's ``count_tokens``, asked of an upstream that serves the Messages API itself."""
        native = self._native(req)
        if native is None:
            raise InvalidRequestError(
                f"Token counting is not available for the model '{req.model}': its upstream is not configured "
                "to serve the Messages API ('native_apis').", param="model", code="unsupported_parameter")
        native.pop("stream", None)
        resp: Http1Response | None = None
        try:
            resp = await self._ensure_client().request("POST", "/messages/count_tokens", self._native_headers,
                                                       orjson.dumps(native))
            if resp.status >= 400:
                raise await _error_from_response(resp, self.name)
            obj = orjson.loads(await resp.read(_MAX_ERROR_BODY))
        except Http1ConnectError as exc:
            raise BackendUnavailableError(f"upstream '{self.name}' is unreachable: {exc}") from exc
        except (TimeoutError, Http1Error, orjson.JSONDecodeError) as exc:
            raise UpstreamError(f"upstream '{self.name}' failed to count tokens: {exc}") from exc
        finally:
            if resp is not None:
                resp.release()
        count = obj.get("input_tokens") if isinstance(obj, dict) else None
        if not isinstance(count, int):
            raise UpstreamError(f"upstream '{self.name}' sent no 'input_tokens' count")
        return count

    # -- internals ----------------------------------------------------------------------------

    def _native(self, req: GenerationRequest) -> dict[str, Any] | None:
        """The body to pass through when the upstream serves the request's own API; else None."""
        if req.native_api is None or req.native_api not in self.native_apis or req.native_body is None:
            return None
        return {**req.native_body, "model": self.upstream_model or req.model, "stream": True}

    def _ensure_client(self) -> Http1Pool:
        if self._client is None:
            self._client = Http1Pool(self.base_url, connect_timeout_s=self._connect_timeout_s,
                                     read_timeout_s=self._read_timeout_s, max_connections=self._max_connections)  # fmt: skip
        return self._client

    def _upstream_body(self, req: GenerationRequest) -> dict[str, Any]:
        body = openai_body(req)
        body["model"] = self.upstream_model or req.model
        body["stream"] = True
        # Always ask for usage; the gateway drops it when the client did not.
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return body


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read the body's end after [DONE] so the connection goes back to the keep-alive pool
    (a response closed early is dropped and the next request pays for a new connection)."""
    try:
        async with asyncio.timeout(_DRAIN_TIMEOUT_S):
            async for _ in chunks:
                pass
    except (TimeoutError, Http1Error):
        pass  # the connection is simply not reused


def _refuse_unrelayed(req: GenerationRequest) -> None:
    """vLLM's ``prompt_logprobs``: the gateway's re-encoding of upstream chunks does not carry it,
    so it is refused by name rather than sent on and its answer dropped (README, compatibility).
    ``return_token_ids`` is relayed (openai_chunks)."""
    if req.options.prompt_logprobs is not None:
        raise InvalidRequestError(
            "'prompt_logprobs' is not supported for this model: the gateway does not relay it from an upstream server.",
            param="prompt_logprobs", code="unsupported_parameter",
        )


async def _error_from_response(resp: Http1Response, name: str) -> BlinkError:
    raw = await resp.read(_MAX_ERROR_BODY)
    headers = {"retry-after": resp.headers["retry-after"]} if "retry-after" in resp.headers else {}
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = {}
    if not isinstance(obj, dict):
        obj = {}
    if obj.get("object") == "error":  # vLLM <= 0.9: {"object": "error", "message", "type", "param", "code"}
        obj = {"error": obj}
    if "error" not in obj:
        obj = {"error": {"message": raw[:500].decode("utf-8", "replace") or _reason(resp.status)}}
    return _error_from_body(obj, resp.status, name, headers)


def _error_from_body(obj: dict[str, Any], status: int, name: str, headers: dict[str, str]) -> BlinkError:
    err = obj.get("error")
    if not isinstance(err, dict):
        err = {"message": str(err)}
    message = str(err.get("message") or f"upstream '{name}' failed with status {status}")
    param = err.get("param")
    code = err.get("code")
    if 400 <= status < 500:
        return UpstreamClientError(
            message,
            status=status,
            error_type=err.get("type"),
            param=param if isinstance(param, str) else None,
            code=str(code) if code is not None else None,
            headers=headers,
        )
    if status == 503:
        return BackendUnavailableError(f"upstream '{name}': {message}", headers=headers)
    return UpstreamError(f"upstream '{name}' failed ({status}): {message}")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _whole_deltas(whole: dict[str, Any], kind: str, name: str) -> list[Delta]:
    """Deltas of a whole (non-streamed) chat or completion response."""
    try:
        return deltas_from_chunk(whole, kind)
    except MalformedChunk as exc:
        raise UpstreamError(f"upstream '{name}' sent a malformed response ({exc})") from exc


def _native_deltas(api: str | None, whole: dict[str, Any], name: str) -> list[Delta]:
    """Deltas of a whole (non-streamed) answer in the upstream's own API."""
    return checked_deltas(name, deltas_from_message if api == "messages" else deltas_from_response, whole, name)


def _native_decoder(api: str | None, name: str) -> NativeEventDecoder:
    return AnthropicStreamDecoder(name) if api == "messages" else ResponsesEventDecoder(name)
