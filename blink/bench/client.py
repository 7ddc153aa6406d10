"""Stream one chat completion and timestamp every content chunk as it arrives."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
import orjson

from blink.bench.workloads import BenchRequest


@dataclass(slots=True)
class Endpoint:
    base_url: str  # ".../v1"
    model: str
    api_key: str | None = None

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(slots=True)
class RequestResult:
    endpoint: int
    index: int
    start: float  # seconds since the run began
    tag: str = ""
    ttft: float | None = None
    e2e: float | None = None
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    error: str | None = None  # error type; None = success

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e is not None

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


async def stream_one(client: httpx.AsyncClient, ep: Endpoint, req: BenchRequest, result: RequestResult,
                     run_start: float) -> RequestResult:
    body = {"model": ep.model, "messages": req.messages, "max_tokens": req.max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, **req.extra}
    headers = {"content-type": "application/json"}
    if ep.api_key:
        headers["authorization"] = f"Bearer {ep.api_key}"
    t0 = time.perf_counter()
    result.start = t0 - run_start
    last: float | None = None
    chunks = 0
    try:
        async with client.stream("POST", ep.url, content=orjson.dumps(body), headers=headers) as resp:
            if resp.status_code != 200:
                result.error = _error_type(resp.status_code, await resp.aread())
                return result
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                obj = orjson.loads(data)
                if "error" in obj:
                    result.error = f"stream:{(obj['error'] or {}).get('type') or 'error'}"
                    return result
                if obj.get("usage"):
                    result.output_tokens = int(obj["usage"].get("completion_tokens") or 0)
                    result.prompt_tokens = int(obj["usage"].get("prompt_tokens") or 0)
                for choice in obj.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
                    if text:
                        now = time.perf_counter()
                        if last is None:
                            result.ttft = now - t0
                        else:
                            result.itl.append(now - last)
                        last = now
                        chunks += 1
        result.e2e = time.perf_counter() - t0
        if not result.output_tokens:
            result.output_tokens = chunks
        if chunks == 0:
            result.error = "empty_response"
    except httpx.TimeoutException:
        result.error = "timeout"
    except httpx.TransportError as exc:
        result.error = f"transport:{type(exc).__name__}"
    except (orjson.JSONDecodeError, ValueError):
        result.error = "bad_response"
    return result


def _error_type(status: int, body: bytes) -> str:
    try:
        err = orjson.loads(body).get("error") or {}
        kind = err.get("type") or err.get("code")
    except (orjson.JSONDecodeError, AttributeError):
        kind = None
    return f"http_{status}" + (f":{kind}" if kind else "")
