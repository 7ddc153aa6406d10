"""What the engine reports per request per step; plain data that crosses the process seam."""

from __future__ import annotations

import msgspec


class TokenLogprobOut(msgspec.Struct, array_like=True):
    token_id: int
    logprob: float
    # (token_id, logprob) pairs of the most likely tokens at this position.
    top: list[tuple[int, float]] | None = None
    # 1 + the number of more likely tokens; set for prompt tokens (vLLM reports it there).
    rank: int | None = None


class RequestOutput(msgspec.Struct, array_like=True):
    """Increment of one request: new tokens and the text they completed (may be empty)."""

    request_id: str
    new_token_ids: list[int]
    text: str
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    num_output_tokens: int = 0
    logprobs: list[TokenLogprobOut] | None = None
    error: str | None = None
    # Sent once, with the first output after the prefill: one entry per prompt token, the first
    # None (nothing predicts it). Only when the request asked for prompt logprobs.
    prompt_logprobs: list[TokenLogprobOut | None] | None = None
    # With ``error``: the request field at fault when the request itself was refused (a spec that
    # compiles to a grammar with no output), so the frontend answers 400 naming it, not 500.
    error_param: str | None = None


class EngineStats(msgspec.Struct):
    """Live engine state for load reporting and metrics."""

    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    prefix_cache_hit_rate: float = 0.0
    num_blocks: int = 0
    steps: int = 0
    batch_size: int = 0
    # Speculative decoding: share of proposed tokens accepted, and mean tokens emitted per
    # verifying sequence-step (1 + accepted); zero while speculation is off.
    spec_acceptance_rate: float = 0.0
    spec_tokens_per_step: float = 0.0
    spec_proposed_tokens: int = 0
    spec_accepted_tokens: int = 0
    # Per priority class (voice, interactive, batch, in PRIORITY_RANK order): queue depth, running
    # requests, requests admitted so far and their summed queue wait (arrival -> first scheduled).
    waiting_by_class: list[int] = msgspec.field(default_factory=list)
    running_by_class: list[int] = msgspec.field(default_factory=list)
    admitted_by_class: list[int] = msgspec.field(default_factory=list)
    queue_wait_s_by_class: list[float] = msgspec.field(default_factory=list)
