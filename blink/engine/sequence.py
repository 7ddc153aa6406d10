"""Per-request state shared by the scheduler, block manager, model runner and sampler.

One object per request, mutated in place by its owners (nano-vllm style) so a step never copies
token lists: the scheduler owns status and queues, the block manager owns ``block_table`` and the
hash bookkeeping, the engine appends tokens.
"""

from __future__ import annotations

import enum
import hashlib
import time
from typing import TYPE_CHECKING

from blink.engine.sampling_params import PRIORITY_RANK, SamplingParams

if TYPE_CHECKING:
    import torch


def salt_digest(salt: str | None) -> bytes | None:
    """The digest a salted prefix-cache chain starts from (the first block's parent); None unsalted.

    A distinct prefix keeps it apart from every block digest, which hashes a parent and token ids.
    """
    if salt is None:
        return None
    return hashlib.sha256(b"blink-cache-salt\0" + salt.encode("utf-8", "surrogatepass")).digest()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        eos_token_ids: frozenset[int],
        arrival_time: float | None = None,
    ) -> None:
        self.request_id = request_id
        self.params = params
        self.eos_token_ids = eos_token_ids
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.token_ids)
        # Tokens whose KV is in the cache (prefix-cache hits included).
        self.num_computed_tokens = 0
        # Tokens served from the prefix cache at the (last) admission.
        self.num_cached_tokens = 0
        self.block_table: list[int] = []
        # Chained content hashes of this sequence's full blocks, in order. A pure function of
        # token_ids (which only ever grow), so it survives preemption and is computed once.
        self.block_hashes: list[bytes] = []
        # The parent digest of the first block: the cache salt's, so differently salted sequences
        # never share a block; None (the unsalted chain) without one.
        self.cache_root: bytes | None = salt_digest(params.cache_salt)
        # Leading entries of block_table already offered to the prefix cache (block manager only).
        self.num_hashed_blocks = 0
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.generator: torch.Generator | None = None
        self.num_preemptions = 0
        # Scheduling class (0 = most urgent); unknown names (never validated) count as interactive.
        self.priority_rank = PRIORITY_RANK.get(params.priority, PRIORITY_RANK["interactive"])
        # The class it asked for; ``priority_rank`` is the lane it is in now (the scheduler moves a
        # bulk sequence to the batch lane while urgent work waits).
        self.requested_rank = self.priority_rank
        # When the scheduler first admitted it (queue-wait metrics); None while never run.
        self.first_scheduled_time: float | None = None
        # Every prompt position still needs its logits (prompt logprobs were asked for and not
        # all computed yet): the prefill returns a row per token and skips the prefix cache,
        # whose cached blocks come with no logits.
        self.prompt_logits_pending = params.prompt_logprobs is not None and self.num_prompt_tokens > 1

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, status={self.status.name}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})"
        )

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def last_token_id(self) -> int:
        return self.token_ids[-1]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def is_prefill_done(self) -> bool:
        """True when every token has KV, i.e. the last forward produced a logit worth sampling."""
        return self.num_computed_tokens >= self.num_tokens

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def check_stop(self, max_model_len: int) -> str | None:
        """Finish reason implied by the last appended token, or None to keep going.

        Token-level stops only (EOS, stop_token_ids, max_tokens, context length); stop strings
        are found on the detokenized text by StopStringMatcher. Sets ``stop_reason`` to the
        stop token id when a stop_token_ids entry fired (OpenAI/vLLM convention; None for EOS).
        """
        n_out = self.num_output_tokens
        if n_out <= 0:
            return None
        last = self.token_ids[-1]
        # min_tokens counts tokens before the stop: the sampler masks EOS while fewer exist.
        if n_out > self.params.min_tokens:
            if not self.params.ignore_eos and last in self.eos_token_ids:
                return "stop"
            if last in self.params.stop_token_ids:
                self.stop_reason = last
                return "stop"
        if self.params.max_tokens is not None and n_out >= self.params.max_tokens:
            return "length"
        if max_model_len > 0 and self.num_tokens >= max_model_len:
            return "length"
        return None
