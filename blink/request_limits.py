"""What one generation request may ask of a model: the single table of sampling-field limits.

The wire schemas (``blink.protocol``) and the engine's own ``SamplingParams`` validation both read
these numbers, so a value the gateway accepts is one the engine can take: a request that passed
the boundary can never reach the sampler with, say, a ``top_k`` that overflows a tensor. The
module sits outside both layers because the engine may not import the protocol and the gateway
may not import the engine (pyproject's import-linter contracts); it imports nothing itself.

Limits that depend on the model (``top_k`` <= vocabulary size, prompt + ``max_tokens`` <= context
length) are checked where the model is known: the engine's ``request_checks``.
"""

from __future__ import annotations

from dataclasses import dataclass

# Seeds travel as signed 64-bit integers (torch generators, msgpack, other servers' C++ parsers).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Counts and token ids are held in 32-bit ints by tensors and by most upstream servers.
INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SamplingLimits:
    # OpenAI documents temperature in [0, 2].
    max_temperature: float = 2.0
    # OpenAI documents presence and frequency penalties in [-2, 2].
    max_penalty: float = 2.0
    # vLLM's multiplicative repetition penalty: (0, max]; 2 already all but forbids a seen token.
    max_repetition_penalty: float = 2.0
    # `logit_bias` values: OpenAI documents -100..100 (100 all but forces a token, -100 bans it).
    max_logit_bias: float = 100.0
    # `logit_bias` entries per request: OpenAI documents no number; this bounds the per-step work
    # while leaving room for banning a whole word list (vLLM sets no limit).
    max_logit_bias_entries: int = 1024
    # Choices per request (OpenAI's documented maximum for `n`, and `best_of`).
    max_n: int = 128
    # Prompts in one batched completion (vLLM sets no limit; lm-eval sends its batch size); each
    # prompt's `n` choices are engine sequences, bounded per key by the sequence quota.
    max_prompts: int = 256
    # `top_logprobs` (chat) and `logprobs` (completions): OpenAI caps chat at 20, vLLM both.
    max_logprobs: int = 20
    # Stop sequences: OpenAI allows 4, vLLM any number; 16 keeps per-token matching cheap.
    max_stop_strings: int = 16
    # Characters per stop sequence: the matcher holds back up to this much text per token.
    max_stop_chars: int = 1024
    # stop_token_ids per request (each is also checked against the vocabulary by the engine).
    max_stop_token_ids: int = 256
    # `top_k`: -1 or 0 = off; the engine also requires top_k <= its vocabulary size.
    max_top_k: int = INT32_MAX
    # `max_tokens` / `min_tokens`: the context length is the real bound (checked per model).
    max_tokens: int = INT32_MAX
    min_seed: int = INT64_MIN
    max_seed: int = INT64_MAX
    # Structured outputs: characters of one spec (a JSON schema's text, a regex, a choice list, an
    # EBNF grammar). Compile time grows with the spec; 64 KiB holds any hand-written or
    # pydantic-generated schema and a few thousand enum values, compiled in seconds at worst.
    max_structured_spec_chars: int = 64 * 1024
    # Nesting of lists and objects in a JSON schema or choice list. The grammar engine's compile
    # time grows steeply with nesting (an object nested 100 deep took seconds on a 512-token
    # vocabulary); 32 levels is about 16 nested objects, deeper than generated schemas go (they
    # nest through $defs references, which do not count here).
    max_structured_depth: int = 32


SAMPLING_LIMITS = SamplingLimits()

# The most of an engine's sequence slots (`max_num_seqs`) one request's `n` choices may hold at
# once; its other choices wait while other requests proceed (issue #20: an n=128 request took all 64).
DEFAULT_MAX_SEQS_PER_REQUEST_SHARE = 0.25


def wrap_seed(seed: int) -> int:
    """``seed`` folded into int64 (two's complement), for derived seeds such as ``seed + choice``."""
    return (seed - INT64_MIN) % 2**64 + INT64_MIN
