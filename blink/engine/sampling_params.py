"""Per-request sampling parameters and their validation.

Validation lives here (not in the HTTP layer) so every caller of the engine, in-process or over
IPC, gets the same typed error naming the OpenAI field that was wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from blink.engine.errors import InvalidParameterError

# OpenAI documents temperature in [0, 2] and both penalties in [-2, 2].
MAX_TEMPERATURE = 2.0
MAX_PENALTY = 2.0
# OpenAI's `top_logprobs` accepts 0..20.
MAX_LOGPROBS = 20
# OpenAI accepts "up to 4 sequences" in `stop`.
MAX_STOP_STRINGS = 4
# torch.Generator.manual_seed accepts [-2**63, 2**64).
_SEED_MIN, _SEED_MAX = -(2**63), 2**64 - 1
# Below this a temperature is treated as greedy: dividing logits by it overflows float32 softmax.
GREEDY_TEMPERATURE = 1e-5
# Priority classes, most urgent first (rank 0): real-time speech, then chat (the default), then bulk
# work that only fills capacity the others leave (the scheduler reads the rank).
PRIORITY_RANK = {"voice": 0, "interactive": 1, "batch": 2}
BATCH_RANK = PRIORITY_RANK["batch"]


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
    min_tokens: int = 0
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    # False opts this request out of speculative decoding (when the engine has it on).
    speculative: bool = True
    # Scheduling class: a key of PRIORITY_RANK.
    priority: str = "interactive"

    @property
    def is_greedy(self) -> bool:
        """Argmax sampling: no randomness is consumed, so the seed is irrelevant."""
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    def validate(self) -> None:
        """Raise InvalidParameterError (param = OpenAI field name) on the first bad field."""
        _check_number(self.temperature, "temperature", 0.0, MAX_TEMPERATURE)
        _check_number(self.top_p, "top_p", 0.0, 1.0)
        if self.top_p <= 0.0:
            raise InvalidParameterError("top_p must be in (0, 1]", param="top_p")
        _check_int(self.top_k, "top_k")
        if self.top_k < -1:
            raise InvalidParameterError("top_k must be -1 or 0 (off) or >= 1", param="top_k")
        _check_number(self.min_p, "min_p", 0.0, 1.0)
        _check_number(self.presence_penalty, "presence_penalty", -MAX_PENALTY, MAX_PENALTY)
        _check_number(self.frequency_penalty, "frequency_penalty", -MAX_PENALTY, MAX_PENALTY)
        _check_number(self.repetition_penalty, "repetition_penalty", 0.0, math.inf)
        if self.repetition_penalty <= 0.0:
            raise InvalidParameterError("repetition_penalty must be > 0", param="repetition_penalty")
        if self.max_tokens is not None:
            _check_int(self.max_tokens, "max_tokens")
            if self.max_tokens < 1:
                raise InvalidParameterError("max_tokens must be >= 1", param="max_tokens")
        _check_int(self.min_tokens, "min_tokens")
        if self.min_tokens < 0:
            raise InvalidParameterError("min_tokens must be >= 0", param="min_tokens")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise InvalidParameterError("min_tokens must not exceed max_tokens", param="min_tokens")
        if self.logprobs is not None:
            _check_int(self.logprobs, "top_logprobs")
            if not 0 <= self.logprobs <= MAX_LOGPROBS:
                raise InvalidParameterError(
                    f"top_logprobs must be between 0 and {MAX_LOGPROBS}", param="top_logprobs"
                )
        if self.seed is not None:
            _check_int(self.seed, "seed")
            if not _SEED_MIN <= self.seed <= _SEED_MAX:
                raise InvalidParameterError("seed must fit in 64 bits", param="seed")
        self._validate_stop()
        if self.priority not in PRIORITY_RANK:
            raise InvalidParameterError(
                f"priority must be one of {', '.join(PRIORITY_RANK)}", param="priority"
            )
        for flag in ("ignore_eos", "skip_special_tokens", "speculative"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidParameterError(f"{flag} must be a boolean", param=flag)

    def _validate_stop(self) -> None:
        if not isinstance(self.stop, list):
            raise InvalidParameterError("stop must be a list of strings", param="stop")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise InvalidParameterError(f"stop accepts at most {MAX_STOP_STRINGS} sequences", param="stop")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise InvalidParameterError("stop sequences must be non-empty strings", param="stop")
        if not isinstance(self.stop_token_ids, list):
            raise InvalidParameterError("stop_token_ids must be a list of ints", param="stop_token_ids")
        for t in self.stop_token_ids:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
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
