"""Draft-model proposals: a smaller checkpoint sharing the tokenizer guesses K tokens.

The draft keeps its own KV pool with the target's block count and block size and writes it at
the *same* block ids, so the target's block manager manages both caches: whatever blocks a
sequence holds for the target hold its draft KV too, and prefix sharing, trimming and freeing
need no second bookkeeping. Draft KV in a block shared from the prefix cache is rewritten by a
new request's catch-up with identical values (KV at a position depends only on the tokens up to
it), so a shared block is never read stale.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from blink.engine.config import EngineConfig
from blink.engine.errors import EngineError
from blink.engine.model_runner import ModelRunner, RunSpan
from blink.engine.sampler import processed_probs, sample_inverse_cdf, uniforms
from blink.engine.sequence import Sequence
from blink.engine.spec_decode.proposer import Proposal


class DraftModelProposer:
    def __init__(self, config: EngineConfig, target: ModelRunner) -> None:
        draft_config = EngineConfig.model_validate(config.engine_fields() | {
            "model": str(config.speculative_draft_model),
            "speculative": "none",
            "max_model_len": target.max_model_len,
            "threads": 0,  # the target runner already set the process's threads
        })
        self.runner = ModelRunner(draft_config, num_blocks=target.num_blocks)
        if self.runner.vocab_size != target.vocab_size:
            raise EngineError(
                f"draft model vocabulary ({self.runner.vocab_size}) differs from the target's "
                f"({target.vocab_size}); the draft must share the tokenizer"
            )
        # Per request: preemption count, sequence length when the draft last ran, and the tokens
        # whose draft KV it wrote (that sequence plus the drafted tokens it fed back).
        self._fed: dict[str, tuple[int, int, list[int]]] = {}

    def release(self, request_id: str) -> None:
        self._fed.pop(request_id, None)

    def _valid_prefix(self, seq: Sequence) -> int:
        """Leading positions whose draft KV matches the sequence (at least one token is re-fed)."""
        preemptions, base, fed = self._fed.get(seq.request_id, (-1, 0, []))
        if preemptions != seq.num_preemptions:
            return 0
        limit = min(len(fed), seq.num_tokens - 1)
        # Tokens only grow, so the first ``base`` fed tokens (the sequence when the draft last
        # ran) still match; only the drafted tail after them can differ.
        n = min(base, limit)
        tokens = seq.token_ids
        while n < limit and fed[n] == tokens[n]:
            n += 1
        return n

    def propose(self, requests: Seq[tuple[Sequence, int]]) -> list[Proposal]:
        drafted: list[list[int]] = [[] for _ in requests]
        probs: list[list[torch.Tensor]] = [[] for _ in requests]
        spans: list[RunSpan] = []
        for seq, _ in requests:
            start = self._valid_prefix(seq)
            spans.append(RunSpan(seq.request_id, seq.token_ids[start:], start, seq.block_table))
        active = list(range(len(requests)))
        step = 0
        while active:
            logits = self.runner.execute_spans(spans)
            self._draw(logits, [requests[i][0] for i in active], active, drafted, probs)
            step += 1
            active = [i for i in active if requests[i][1] > step]
            spans = [
                RunSpan(
                    requests[i][0].request_id,
                    [drafted[i][-1]],
                    requests[i][0].num_tokens + step - 1,
                    requests[i][0].block_table,
                )
                for i in active
            ]
        for i, (seq, k) in enumerate(requests):
            fed = seq.token_ids + drafted[i][: k - 1]
            self._fed[seq.request_id] = (seq.num_preemptions, seq.num_tokens, fed)
        return [
            Proposal(drafted[i], torch.stack(probs[i]) if probs[i] else None) for i in range(len(requests))
        ]

    @staticmethod
    def _draw(
        logits: torch.Tensor,
        seqs: list[Sequence],
        rows: list[int],
        drafted: list[list[int]],
        probs: list[list[torch.Tensor]],
    ) -> None:
        """Greedy rows take the argmax (their verification needs no q); random rows sample q."""
        greedy = logits.argmax(dim=-1).tolist()
        random_rows = [j for j, s in enumerate(seqs) if not s.params.is_greedy]
        if random_rows:
            q = processed_probs(logits[random_rows].float(), [seqs[j].params for j in random_rows])
            picks = sample_inverse_cdf(q, uniforms([seqs[j] for j in random_rows], logits.device)).tolist()
            for n, j in enumerate(random_rows):
                greedy[j] = picks[n]
                probs[rows[j]].append(q[n])
        for j, i in enumerate(rows):
            drafted[i].append(greedy[j])
