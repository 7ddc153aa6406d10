"""Validated OpenAI request -> ``GenerationRequest`` (the backend-neutral form)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from random import getrandbits
from typing import Any

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.request_body import request_from_body
from blink.gateway.chat.structured_request import structured_output
from blink.gateway.http.request_parsing import bounded_int
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.common import PRIORITIES, SamplingFields
from blink.protocol.completions import CompletionRequest, Prompt
from blink.protocol.errors import InvalidRequestError
from blink.request_limits import INT32_MAX, SAMPLING_LIMITS


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
    options.echo = body.echo
    if body.continue_final_message and body.add_generation_prompt:
        raise InvalidRequestError(
            "'continue_final_message' and 'add_generation_prompt' cannot both be true.",
            param="continue_final_message", code="invalid_value",
        )
    return request_from_body(f"chatcmpl-{_hex_id()}", model, "chat", options, raw, messages=raw["messages"],
                             deadline=_deadline(timeout_s))


def completion_request(
    body: CompletionRequest, raw: dict[str, Any], model: str, max_tokens_limit: int, timeout_s: float | None
) -> GenerationRequest:
    prompts = _prompts(body.prompt)
    # OpenAI's default for /v1/completions is 16 tokens.
    max_tokens = body.max_tokens if body.max_tokens is not None else 16
    if max_tokens == 0 and not body.echo:
        raise InvalidRequestError("'max_tokens' may be 0 only with 'echo': true (the prompt alone is returned).",
                                  param="max_tokens", code="invalid_value")
    options = _options(body, max_tokens, "max_tokens", max_tokens_limit)
    if body.logprobs is not None:
        options.logprobs = True
        options.top_logprobs = body.logprobs
    options.echo = body.echo
    return request_from_body(f"cmpl-{_hex_id()}", model, "completion", options, raw, prompt=prompts[0],
                             prompts=prompts if len(prompts) > 1 else None, deadline=_deadline(timeout_s))


def _prompts(prompt: Prompt) -> list[str | list[int]]:
    """The prompt field as a list of prompts: a string, a token list, or a batch of either."""
    if isinstance(prompt, str):
        prompts: list[str | list[int]] = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [list(prompt)]  # type: ignore[arg-type]  # list[int]
    else:
        prompts = list(prompt)  # type: ignore[arg-type]  # list[str] | list[list[int]]
    if not prompts:
        raise InvalidRequestError("'prompt' must not be empty.", param="prompt", code="invalid_value")
    if len(prompts) > SAMPLING_LIMITS.max_prompts:
        raise InvalidRequestError(f"'prompt' may hold at most {SAMPLING_LIMITS.max_prompts} prompts; got {len(prompts)}.",
                                  param="prompt", code="invalid_value")
    for i, p in enumerate(prompts):
        if p == "" or p == []:
            param = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
            raise InvalidRequestError(f"'{param}' must not be empty.", param=param, code="invalid_value")
    return prompts


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
    if body.stream_options is not None and not body.stream:
        raise InvalidRequestError("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                                  param="stream_options", code="invalid_value")
    if body.prompt_logprobs is not None and body.stream:
        raise InvalidRequestError("'prompt_logprobs' is not available when 'stream' is enabled.",
                                  param="prompt_logprobs", code="invalid_value")
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
        logit_bias=_logit_bias(body.logit_bias),
        prompt_logprobs=body.prompt_logprobs,
        return_token_ids=bool(body.return_token_ids),
        skip_special_tokens=body.skip_special_tokens,
        include_stop_str_in_output=body.include_stop_str_in_output,
        structured=structured_output(body),
    )


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI's JSON keys are token ids written as decimal strings; anything else is a 400 (the
    vocabulary bound is the backend's: only it knows the model)."""
    if not bias:
        return None
    if len(bias) > SAMPLING_LIMITS.max_logit_bias_entries:
        raise InvalidRequestError(
            f"'logit_bias' may hold at most {SAMPLING_LIMITS.max_logit_bias_entries} token ids; got {len(bias)}.",
            param="logit_bias", code="invalid_value",
        )
    out: dict[int, float] = {}
    for key, value in bias.items():
        token_id = bounded_int(key, 0, INT32_MAX)
        if token_id is None:
            raise InvalidRequestError(
                f"Invalid key in 'logit_bias': {key[:40]!r} is not a token id (a non-negative integer).",
                param="logit_bias", code="invalid_value",
            )
        out[token_id] = float(value)
    return out


def _deadline(timeout_s: float | None) -> float | None:
    return None if timeout_s is None else time.monotonic() + timeout_s


def _hex_id() -> str:
    """32 random hex digits, like ``uuid4().hex``: request ids need uniqueness, not secrecy, and
    the process's Mersenne Twister (seeded from the OS, reseeded after a fork) gives it without
    uuid4's ``os.urandom`` system call and UUID object."""
    return f"{getrandbits(128):032x}"
