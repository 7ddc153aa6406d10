"""Per-request sampling parameters and their validation.

Validation lives here (not in the HTTP layer) so every caller of the engine, in-process or over
IPC, gets the same typed error naming the OpenAI field that was wrong. The ranges are those of
``blink.request_limits.SAMPLING_LIMITS``, the table the wire schemas use too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from blink.engine.errors import InvalidParameterError
from blink.engine.structured.grammar_engine import ENGINE_NAMES
from blink.engine.structured.spec import PARAM, check_shape
from blink.request_limits import INT32_MAX, SAMPLING_LIMITS

_L = SAMPLING_LIMITS
# Below this a temperature is treated as greedy: dividing logits by it overflows float32 softmax.
GREEDY_TEMPERATURE = 1e-5
# Priority classes, most urgent first (rank 0): real-time speech, then chat (the default), then bulk
# work that only fills capacity the others leave, then work done only while the engine has nothing
# else at all (pre-computation): the scheduler reads the rank.
PRIORITY_RANK = {"voice": 0, "interactive": 1, "batch": 2, "idle": 3}
BATCH_RANK = PRIORITY_RANK["batch"]
IDLE_RANK = PRIORITY_RANK["idle"]


# The gateway's salt is a tenant name and the client's ``cache_salt`` (256 characters at most) in JSON.
_MAX_SALT = 4096


@dataclass
class SamplingParams:
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # 0 or -1 = off
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # Number of top logprobs per token; 0 = only the chosen token's; None = no logprobs.
    logprobs: int | None = None
    # The same for every prompt token after the first (vLLM's ``prompt_logprobs``; completions'
    # ``echo`` with ``logprobs``): computed in the prefill, which then skips the prefix cache.
    prompt_logprobs: int | None = None
    # Token id -> value added to its logit before sampling (OpenAI's ``logit_bias``).
    logit_bias: dict[int, float] | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # False opts this request out of speculative decoding (when the engine has it on).
    speculative: bool = True
    # Scheduling class: a key of PRIORITY_RANK.
    priority: str = "interactive"
    # The sequences of one request (its ``n`` choices, the prompts of a batched completion) share
    # a group; every one after the first is bulk: more than one stream's fair share. While another
    # request's voice or interactive sequence that is not bulk is running or waiting, the scheduler
    # serves bulk in the batch lane; otherwise in its own class, so it never waits on an idle engine.
    group: str | None = None
    bulk: bool = False
    # Grammar-constrained decoding: (kind, spec), kind one of blink.engine.structured.spec.KINDS.
    # A tuple (or, after msgpack, a two-item list) so it crosses the engine-core seam as is.
    structured: tuple[str, str] | None = None
    # The grammar library for this request (vLLM's ``guided_decoding_backend``): one of
    # structured.grammar_engine.ENGINE_NAMES, or None for the engine's ``structured_engine``.
    structured_engine: str | None = None
    # Prefix-cache scope (vLLM's ``cache_salt``): only sequences with the same salt share cached KV
    # blocks. Shared KV leaks across tenants: a hit shows in ``cached_tokens`` and in the time to
    # first token, so another tenant could test whether a guessed prompt was sent.
    cache_salt: str | None = None

    @property
    def is_greedy(self) -> bool:
        """Argmax sampling: no randomness is consumed, so the seed is irrelevant."""
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    def validate(self) -> None:
        """Raise InvalidParameterError (param = OpenAI field name) on the first bad field."""
        _check_number(self.temperature, "temperature", 0.0, _L.max_temperature)
        _check_number(self.top_p, "top_p", 0.0, 1.0)
        if self.top_p <= 0.0:
            raise InvalidParameterError("top_p must be in (0, 1]", param="top_p")
        _check_int(self.top_k, "top_k")
        if not -1 <= self.top_k <= _L.max_top_k:
            raise InvalidParameterError(
                f"top_k must be -1 or 0 (off), or between 1 and the vocabulary size ({_L.max_top_k} at most)",
                param="top_k",
            )
        _check_number(self.min_p, "min_p", 0.0, 1.0)
        _check_number(self.presence_penalty, "presence_penalty", -_L.max_penalty, _L.max_penalty)
        _check_number(self.frequency_penalty, "frequency_penalty", -_L.max_penalty, _L.max_penalty)
        _check_number(self.repetition_penalty, "repetition_penalty", 0.0, _L.max_repetition_penalty)
        if self.repetition_penalty <= 0.0:
            raise InvalidParameterError("repetition_penalty must be > 0", param="repetition_penalty")
        if self.max_tokens is not None:
            _check_int(self.max_tokens, "max_tokens")
            if not 1 <= self.max_tokens <= _L.max_tokens:
                raise InvalidParameterError(f"max_tokens must be between 1 and {_L.max_tokens}", param="max_tokens")
        _check_int(self.min_tokens, "min_tokens")
        if not 0 <= self.min_tokens <= _L.max_tokens:
            raise InvalidParameterError(f"min_tokens must be between 0 and {_L.max_tokens}", param="min_tokens")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise InvalidParameterError("min_tokens must not exceed max_tokens", param="min_tokens")
        if self.logprobs is not None:
            _check_int(self.logprobs, "top_logprobs")
            if not 0 <= self.logprobs <= _L.max_logprobs:
                raise InvalidParameterError(
                    f"top_logprobs must be between 0 and {_L.max_logprobs}", param="top_logprobs"
                )
        if self.prompt_logprobs is not None:
            _check_int(self.prompt_logprobs, "prompt_logprobs")
            if not 0 <= self.prompt_logprobs <= _L.max_logprobs:
                raise InvalidParameterError(
                    f"prompt_logprobs must be between 0 and {_L.max_logprobs}", param="prompt_logprobs"
                )
        self._validate_logit_bias()
        if self.seed is not None:
            _check_int(self.seed, "seed")
            if not _L.min_seed <= self.seed <= _L.max_seed:
                raise InvalidParameterError("seed must be a signed 64-bit integer", param="seed")
        self._validate_stop()
        if self.priority not in PRIORITY_RANK:
            raise InvalidParameterError(
                f"priority must be one of {', '.join(PRIORITY_RANK)}", param="priority"
            )
        self._validate_structured()
        if self.cache_salt is not None and not (isinstance(self.cache_salt, str) and 0 < len(self.cache_salt) <= _MAX_SALT):
            raise InvalidParameterError(f"cache_salt must be a non-empty string of at most {_MAX_SALT} characters",
                                        param="cache_salt")
        for flag in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output", "speculative"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidParameterError(f"{flag} must be a boolean", param=flag)

    def _validate_logit_bias(self) -> None:
        """Ids must be ints (the vocabulary bound is the engine's ``request_checks``)."""
        if self.logit_bias is None:
            return
        if not isinstance(self.logit_bias, dict):
            raise InvalidParameterError("logit_bias must map token ids to numbers", param="logit_bias")
        if len(self.logit_bias) > _L.max_logit_bias_entries:
            raise InvalidParameterError(
                f"logit_bias accepts at most {_L.max_logit_bias_entries} token ids", param="logit_bias"
            )
        for token, bias in self.logit_bias.items():
            if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token <= INT32_MAX:
                raise InvalidParameterError("logit_bias keys must be non-negative token ids", param="logit_bias")
            _check_number(bias, "logit_bias", -_L.max_logit_bias, _L.max_logit_bias)

    def _validate_structured(self) -> None:
        """Shape and size only: the grammar engine's parse check is ``structured.spec.check_spec``,
        run by the frontend off the event loop; the core compiles (and so checks) it again."""
        if self.structured_engine is not None and self.structured_engine not in ENGINE_NAMES:
            raise InvalidParameterError(f"Unknown grammar engine {self.structured_engine!r}; choose one of "
                                        f"{', '.join(ENGINE_NAMES)}.", param="structured_engine")
        if self.structured is None:
            return
        if not isinstance(self.structured, tuple | list) or len(self.structured) != 2:
            raise InvalidParameterError("structured must be a (kind, spec) pair", param=PARAM)
        kind, spec = self.structured
        check_shape(kind, spec)
        # With a grammar, EOS is allowed exactly when the output is complete: forcing it later
        # (min_tokens) or past it (ignore_eos) would contradict the grammar, so neither is taken.
        if self.min_tokens:
            raise InvalidParameterError("min_tokens cannot be combined with structured outputs", param="min_tokens")
        if self.ignore_eos:
            raise InvalidParameterError("ignore_eos cannot be combined with structured outputs", param="ignore_eos")

    def _validate_stop(self) -> None:
        if not isinstance(self.stop, list):
            raise InvalidParameterError("stop must be a list of strings", param="stop")
        if len(self.stop) > _L.max_stop_strings:
            raise InvalidParameterError(f"stop accepts at most {_L.max_stop_strings} sequences", param="stop")
        for s in self.stop:
            if not isinstance(s, str) or not 1 <= len(s) <= _L.max_stop_chars:
                raise InvalidParameterError(
                    f"stop sequences must be strings of 1 to {_L.max_stop_chars} characters", param="stop"
                )
        if not isinstance(self.stop_token_ids, list):
            raise InvalidParameterError("stop_token_ids must be a list of ints", param="stop_token_ids")
        if len(self.stop_token_ids) > _L.max_stop_token_ids:
            raise InvalidParameterError(
                f"stop_token_ids accepts at most {_L.max_stop_token_ids} ids", param="stop_token_ids"
            )
        for t in self.stop_token_ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t <= INT32_MAX:
                raise InvalidParameterError(
                    "stop_token_ids must be non-negative integers", param="stop_token_ids"
                )


def _check_int(value: object, param: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidParameterError(f"{param} must be an integer", param=param)


def _check_number(value: object, param: str, lo: float, hi: float) -> None:
    """Finite real in [lo, hi]; rejects bools, NaN and inf, which plain comparisons let through."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidParameterError(f"{param} must be a finite number", param=param)
    if not lo <= value <= hi:
        raise InvalidParameterError(f"{param} must be between {lo:g} and {hi:g}", param=param)
