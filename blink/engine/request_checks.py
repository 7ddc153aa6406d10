"""Admission checks shared by the sync engine and the async front (so errors come early)."""

from __future__ import annotations

from dataclasses import dataclass

from blink.engine.errors import InvalidParameterError, PromptTooLongError
from blink.engine.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_model_len: int
    num_blocks: int
    block_size: int
    vocab_size: int


def check_request(prompt_token_ids: list[int], params: SamplingParams, limits: EngineLimits) -> None:
    """Raise ``InvalidParameterError`` for anything the engine cannot serve.

    ``params.validate()`` applies the model-independent table (``blink.request_limits``); the
    checks below need this model's vocabulary, context length and KV pool.
    """
    params.validate()
    if params.top_k > limits.vocab_size:
        raise InvalidParameterError(
            f"top_k must be -1 or 0 (off), or at most the vocabulary size ({limits.vocab_size}).",
            param="top_k",
        )
    for token in params.logit_bias or ():
        if token >= limits.vocab_size:
            raise InvalidParameterError(
                f"logit_bias: token id {token} is outside the vocabulary (0..{limits.vocab_size - 1}).",
                param="logit_bias",
            )
    for token in params.stop_token_ids:
        # Harmless to the engine (it would never fire), but a stop that cannot fire is a client bug
        # (another model's id) that should surface, as vLLM reports it.
        if token >= limits.vocab_size:
            raise InvalidParameterError(
                f"stop_token_ids: token id {token} is outside the vocabulary (size {limits.vocab_size}: "
                f"ids 0..{limits.vocab_size - 1}).",
                param="stop_token_ids",
            )
    if not prompt_token_ids:
        raise InvalidParameterError("The prompt is empty.", param="messages")
    n = len(prompt_token_ids)
    if n >= limits.max_model_len:
        raise PromptTooLongError(
            f"This model's maximum context length is {limits.max_model_len} tokens; "
            f"the prompt has {n} tokens.",
            param="messages",
        )
    if params.max_tokens is not None and n + params.max_tokens > limits.max_model_len:
        raise PromptTooLongError(
            f"This model's maximum context length is {limits.max_model_len} tokens. "
            f"However, you requested {n + params.max_tokens} tokens "
            f"({n} in the prompt, {params.max_tokens} for the completion).",
            param="max_tokens",
        )
    if -(-(n + 1) // limits.block_size) > limits.num_blocks:
        raise PromptTooLongError(
            f"The prompt needs more KV-cache blocks than the pool has ({limits.num_blocks} of "
            f"{limits.block_size} tokens); raise the KV-cache memory budget.",
            param="messages",
        )
    vocab = limits.vocab_size
    for t in prompt_token_ids:
        if not 0 <= t < vocab:
            raise InvalidParameterError(f"Token id {t} is outside the vocabulary (0..{vocab - 1}).", param="prompt")
