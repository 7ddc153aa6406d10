"""Validated OpenAI request -> ``GenerationRequest`` (the backend-neutral form)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from random import getrandbits
from typing import Any

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.gateway.structured_request import structured_output
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.common import SamplingFields
from blink.protocol.completions import CompletionRequest
from blink.protocol.errors import InvalidRequestError


def chat_request(
    body: ChatCompletionRequest, raw: dict[str, Any], model: str, max_tokens_limit: int, timeout_s: float | None
) -> GenerationRequest:
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if body.top_logprobs and not body.logprobs:
        raise InvalidRequestError(
            "'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs", code="invalid_value"
        )
    options = _options(body, max_tokens, max_param, max_tokens_limit)
    options.logprobs = body.logprobs
    options.top_logprobs = body.top_logprobs or 0
    return GenerationRequest(
        request_id=f"chatcmpl-{_hex_id()}",
        model=model,
        kind="chat",
        options=options,
        messages=raw["messages"],
        raw=raw,
        deadline=_deadline(timeout_s),
    )


def completion_request(
    body: CompletionRequest, raw: dict[str, Any], model: str, max_tokens_limit: int, timeout_s: float | None
) -> GenerationRequest:
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise InvalidRequestError(
                "Batched prompts are not supported; send one prompt per request.",
                param="prompt",
                code="invalid_value",
            )
        prompt = prompt[0]
    if prompt == "" or prompt == []:
        raise InvalidRequestError("'prompt' must not be empty.", param="prompt", code="invalid_value")
    # OpenAI's default for /v1/completions is 16 tokens.
    max_tokens = body.max_tokens if body.max_tokens is not None else 16
    options = _options(body, max_tokens, "max_tokens", max_tokens_limit)
    if body.logprobs is not None:
        options.logprobs = True
        options.top_logprobs = body.logprobs
    return GenerationRequest(
        request_id=f"cmpl-{_hex_id()}",
        model=model,
        kind="completion",
        options=options,
        prompt=prompt,  # type: ignore[arg-type]  # list[list[int]] unwrapped above
        raw=raw,
        deadline=_deadline(timeout_s),
    )


# Priorities a client may ask for with ``x-blink-priority``, most urgent first (``normal`` is an
# alias of the default, ``interactive``, kept for existing clients).
PRIORITIES = ("voice", "interactive", "normal", "batch")


def apply_routing_headers(req: GenerationRequest, headers: Mapping[str, str]) -> GenerationRequest:
    """Copy the routing headers into ``req`` (routed backends read them, others ignore them)."""
    budget = headers.get("x-blink-latency-budget-ms")
    if budget is not None:
        try:
            req.latency_budget_ms = float(budget)
        except ValueError:
            req.latency_budget_ms = -1.0
        if not req.latency_budget_ms > 0:
            raise InvalidRequestError(
                f"'x-blink-latency-budget-ms' must be a positive number of milliseconds, got {budget!r}.",
                param="x-blink-latency-budget-ms",
                code="invalid_value",
            )
    priority = headers.get("x-blink-priority")
    if priority is not None:
        if priority.lower() not in PRIORITIES:
            raise InvalidRequestError(
                f"'x-blink-priority' must be one of {', '.join(PRIORITIES)}, got {priority!r}.",
                param="x-blink-priority",
                code="invalid_value",
            )
        req.priority = priority.lower()
    req.tier = headers.get("x-blink-tier") or None
    return req


def _options(body: SamplingFields, max_tokens: int | None, max_param: str, limit: int) -> SamplingOptions:
    if max_tokens is not None and max_tokens > limit:
        raise InvalidRequestError(
            f"'{max_param}' is too large: {max_tokens}. This server allows at most {limit} completion tokens.",
            param=max_param,
            code="invalid_value",
        )
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or ())
    if body.min_tokens and max_tokens is not None and body.min_tokens > max_tokens:
        raise InvalidRequestError(
            f"'min_tokens' ({body.min_tokens}) must not exceed '{max_param}' ({max_tokens}).",
            param="min_tokens",
            code="invalid_value",
        )
    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=-1 if body.top_k is None else body.top_k,
        min_p=body.min_p or 0.0,
        seed=body.seed,
        stop=stop,
        stop_token_ids=list(body.stop_token_ids or ()),
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
        n=body.n,
        min_tokens=body.min_tokens,
        ignore_eos=body.ignore_eos,
        speculative=body.speculative,
        structured=structured_output(body),
    )


def _deadline(timeout_s: float | None) -> float | None:
    return None if timeout_s is None else time.monotonic() + timeout_s


def _hex_id() -> str:
    """32 random hex digits, like ``uuid4().hex``: request ids need uniqueness, not secrecy, and
    the process's Mersenne Twister (seeded from the OS, reseeded after a fork) gives it without
    uuid4's ``os.urandom`` system call and UUID object (~0.5 vs ~3 us alone)."""
    return f"{getrandbits(128):032x}"
