"""Per-step token scheduling: how many tokens of each request to compute this step.

Prefill, chunked prefill and decode are one mechanism (vLLM v1): a request is scheduled for
``num_tokens - num_computed_tokens`` tokens, capped by the step's token budget. Running requests
go first so decodes keep flowing while long prompts are chunked; waiting requests are admitted
in arrival order while budget, ``max_num_seqs`` and KV blocks allow. When the pool runs out, the
newest running request is preempted by recompute: its blocks are freed, its progress reset, and
it goes back to the front of the queue with its generated tokens kept.

Priority classes (``SamplingParams.priority``: voice > interactive > batch): each step serves
running voice/interactive requests, then admits waiting ones (preempting running batch requests
when slots or blocks are short), and only then gives what is left of the budget and slots to
batch requests. So batch work fills spare capacity, is preempted first, and a new interactive
request is scheduled in the first step after it arrives, as if no batch work were running; a
step computing an urgent request's first token carries no batch work at all.

The idle class sits below batch: its requests are scheduled only in steps where no other request
is running or waiting at all, under the batch lane's caps, so a user request that arrives waits
for at most the one idle step in progress; idle requests keep their KV blocks while paused and
are the first to be preempted when anyone needs them.

Bulk sequences (``SamplingParams.bulk``: a request's sequences beyond its first) are more than
one stream's fair share. While another request's urgent sequence that is not bulk is running or
waiting, they are served in the batch lane (its caps, preempted first, never in a first-token
step), so an ``n=128`` request costs an interactive user what a batch job would; when no such
work is left they return to the class they asked for and use the whole engine.
"""

from __future__ import annotations

import operator
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from blink.engine.block_manager import BlockManager
from blink.engine.config import EngineConfig
from blink.engine.errors import InvalidParameterError, PromptTooLongError
from blink.engine.sampling_params import BATCH_RANK, IDLE_RANK, PRIORITY_RANK
from blink.engine.sequence import Sequence, SequenceStatus

# Finish reason for a request that outgrew the whole KV pool: it can never continue, and
# "length" is what OpenAI clients expect when a response is cut by a capacity limit.
POOL_EXHAUSTED_REASON = "length"


@dataclass
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int
    # Speculation: KV slots reserved for up to ``num_lookahead`` proposed tokens after the
    # decode token; the proposer fills ``spec_token_ids`` (at most that many) before the forward.
    num_lookahead: int = 0
    spec_token_ids: list[int] = field(default_factory=list)

    @property
    def num_logits(self) -> int:
        """Logit rows this item's forward yields: one per token while its prompt logprobs are
        pending, else its last token's plus one per speculative token."""
        if self.seq.prompt_logits_pending:
            return self.num_new_tokens + len(self.spec_token_ids)
        return 1 + len(self.spec_token_ids)


# How many speculative tokens a decoding sequence may carry this step (0 = none).
LookaheadFn = Callable[[Sequence], int]


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq]
    preempted: list[Sequence]
    num_batched_tokens: int
    # Requests the scheduler itself finished this step (outgrew the KV pool); already freed.
    finished: list[Sequence] = field(default_factory=list)


class Scheduler:
    def __init__(
        self, config: EngineConfig, block_manager: BlockManager, lookahead: LookaheadFn | None = None
    ) -> None:
        if config.max_num_seqs < 1 or config.max_num_batched_tokens < 1 or min(config.max_batch_seqs,
                                                                                config.max_batch_tokens) < 0:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1, the batch caps >= 0")
        self.config = config
        self.block_manager = block_manager
        self.lookahead = lookahead
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._requests: dict[str, Sequence] = {}
        # Bulk sequences asking for an urgent class, and the urgent sequences that are not bulk
        # (in all, and per group): while another group has one of the latter, a bulk sequence is
        # in the batch lane (``_place_bulk``).
        self._bulk: dict[str, Sequence] = {}
        self._num_urgent = 0
        self._urgent_by_group: Counter[str] = Counter()
        self.num_preemptions = 0
        # Per priority rank: requests admitted for the first time and their summed queue wait.
        self.admitted_by_rank = [0] * len(PRIORITY_RANK)
        self.wait_s_by_rank = [0.0] * len(PRIORITY_RANK)

    # ----------------------------------------------------------------- queue management
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def waiting_by_rank(self) -> list[int]:
        counts = [0] * len(PRIORITY_RANK)
        for seq in self.waiting:
            counts[seq.priority_rank] += 1
        return counts

    def running_by_rank(self) -> list[int]:
        counts = [0] * len(PRIORITY_RANK)
        for seq in self.running:
            counts[seq.priority_rank] += 1
        return counts

    def has_unfinished(self) -> bool:
        return bool(self._requests)

    def get(self, request_id: str) -> Sequence | None:
        return self._requests.get(request_id)

    def add(self, seq: Sequence) -> None:
        """Queue a new request; rejects one whose prompt alone could never fit the KV pool."""
        if seq.request_id in self._requests:
            raise InvalidParameterError(f"duplicate request id {seq.request_id!r}", param="request_id")
        if seq.num_tokens < 1:
            raise InvalidParameterError("prompt must contain at least one token", param="prompt")
        bm = self.block_manager
        if bm.blocks_needed(seq.num_tokens) > bm.num_blocks:
            raise PromptTooLongError(
                f"prompt of {seq.num_tokens} tokens exceeds the KV cache capacity of "
                f"{bm.num_blocks * bm.block_size} tokens",
                param="messages",
            )
        seq.status = SequenceStatus.WAITING
        if seq.requested_rank < BATCH_RANK:
            if seq.params.bulk:
                self._bulk[seq.request_id] = seq
                seq.priority_rank = self._bulk_rank(seq)
            else:
                self._count_urgent(seq, 1)
        self._enqueue(seq, front=False)
        self._requests[seq.request_id] = seq

    def _enqueue(self, seq: Sequence, front: bool) -> None:
        """Keep ``waiting`` ordered by class (most urgent first), FIFO within a class; a preempted
        request goes to the front of its class. Scans from the end a new arrival usually joins."""
        rank = seq.priority_rank
        q = self.waiting
        if front:
            i = 0
            while i < len(q) and q[i].priority_rank < rank:
                i += 1
        else:
            i = len(q)
            while i > 0 and q[i - 1].priority_rank > rank:
                i -= 1
        if i == len(q):
            q.append(seq)
        else:
            q.insert(i, seq)

    def abort(self, request_id: str) -> Sequence | None:
        """Finish a request at once (client gone) and free its blocks; None if unknown."""
        seq = self._requests.get(request_id)
        if seq is None:
            return None
        self.finish(seq, "abort")
        return seq

    def finish(self, seq: Sequence, reason: str) -> None:
        """Mark finished, release its blocks and drop it from whichever queue holds it."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        else:
            return
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self.block_manager.free(seq)
        del self._requests[seq.request_id]
        if self._bulk.pop(seq.request_id, None) is None and seq.requested_rank < BATCH_RANK:
            self._count_urgent(seq, -1)

    def _count_urgent(self, seq: Sequence, delta: int) -> None:
        self._num_urgent += delta
        group = seq.params.group
        if group is not None:
            self._urgent_by_group[group] += delta
            if self._urgent_by_group[group] <= 0:
                del self._urgent_by_group[group]

    def _bulk_rank(self, seq: Sequence) -> int:
        """The batch lane while another request's urgent work is left, else the class asked for."""
        others = self._num_urgent - self._urgent_by_group.get(seq.params.group or "", 0)
        return BATCH_RANK if others > 0 else seq.requested_rank

    def _place_bulk(self) -> None:
        """Move bulk sequences between the batch lane and their own class for this step."""
        moved = False
        for seq in self._bulk.values():
            rank = self._bulk_rank(seq)
            if rank != seq.priority_rank:
                seq.priority_rank = rank
                moved = True
        if moved:
            self.waiting = deque(sorted(self.waiting, key=_rank))  # stable: FIFO within a class

    # ----------------------------------------------------------------- the step
    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        preempted: list[Sequence] = []
        finished: list[Sequence] = []
        self._place_bulk()
        # Stable: most urgent class first, admission order within a class, so the tail (the
        # preemption victims) is the newest request of the least urgent class.
        self.running.sort(key=_rank)

        i, budget = self._schedule_running(0, budget, BATCH_RANK, scheduled, preempted, finished)
        # Admitting while preempting would only thrash: wait for running requests to drain.
        if not preempted and not finished:
            i, budget = self._admit(i, scheduled, budget, BATCH_RANK - 1, preempted, finished)
        # A step that computes an urgent request's first token runs without batch work, so
        # that step is as short as it would be with no batch running (batch waits one step).
        if not any(s.seq.num_output_tokens == 0 for s in scheduled):
            cap = self.config.max_batch_tokens
            budget = min(budget, cap) if cap > 0 else budget
            i, budget = self._schedule_running(i, budget, IDLE_RANK, scheduled, preempted, finished)
            if not preempted and not finished:
                i, budget = self._admit(i, scheduled, budget, BATCH_RANK, preempted, finished)
        # The idle class only ever runs alone: any other request, running or waiting, pauses it.
        if not scheduled and not preempted and not finished and self._only_idle_left():
            cap = self.config.max_batch_tokens
            budget = min(budget, cap) if cap > 0 else budget
            i, budget = self._schedule_running(i, budget, len(PRIORITY_RANK), scheduled, preempted, finished)
            if not preempted and not finished:
                self._admit(i, scheduled, budget, IDLE_RANK, preempted, finished)

        return SchedulerOutput(
            scheduled=scheduled,
            preempted=preempted,
            num_batched_tokens=sum(s.num_new_tokens + s.num_lookahead for s in scheduled),
            finished=finished,
        )

    def _schedule_running(
        self,
        i: int,
        budget: int,
        below_rank: int,
        scheduled: list[ScheduledSeq],
        preempted: list[Sequence],
        finished: list[Sequence],
    ) -> tuple[int, int]:
        """Schedule running requests from index ``i`` while their rank is below ``below_rank``."""
        while i < len(self.running) and budget > 0 and self.running[i].priority_rank < below_rank:
            seq = self.running[i]
            num_new = self._num_new_tokens(seq, seq.num_computed_tokens, budget, alone=not scheduled)
            if num_new == 0:
                i += 1
                continue
            lookahead = self._reserve_lookahead(seq, num_new, budget)
            if lookahead:
                scheduled.append(ScheduledSeq(seq, num_new, lookahead))
                budget -= num_new + lookahead
                i += 1
            elif self._allocate_or_preempt(seq, num_new, i, preempted, finished):
                scheduled.append(ScheduledSeq(seq, num_new))
                budget -= num_new
                i += 1
            # else: seq itself left running (preempted or finished); index i now names the next.
        # Skip what the budget left unscheduled in this class range.
        while i < len(self.running) and self.running[i].priority_rank < below_rank:
            i += 1
        return i, budget

    def _reserve_lookahead(self, seq: Sequence, num_new: int, budget: int) -> int:
        """Slots for speculative tokens after a decode token, or 0 (then the plain path runs).

        Speculation never preempts anyone: when the pool cannot take the extra slots the step
        simply decodes one token.
        """
        if self.lookahead is None or num_new != 1:
            return 0
        k = min(self.lookahead(seq), budget - 1)
        if k <= 0 or not self.block_manager.allocate_slots(seq, 1 + k):
            return 0
        return k

    def commit_speculation(self, seq: Sequence, num_accepted: int) -> None:
        """After verification: ``num_accepted`` proposed tokens (now appended) have valid KV.

        Slots past the sequence's tokens held only rejected proposals; their blocks go back to
        the pool (they were never registered in the prefix cache: only computed KV is).
        """
        if seq.status is not SequenceStatus.RUNNING:
            return  # finished by a stop inside the accepted tokens: already freed
        seq.num_computed_tokens += num_accepted
        self.block_manager.cache_full_blocks(seq)
        self.block_manager.trim(seq, seq.num_tokens)

    def _num_new_tokens(self, seq: Sequence, num_computed: int, budget: int, alone: bool) -> int:
        """Tokens to compute for ``seq`` within ``budget``; 0 means skip it this step."""
        remaining = seq.num_tokens - num_computed
        if remaining <= budget:
            return remaining
        if self.config.enable_chunked_prefill:
            return budget
        # Unchunked: a prompt is computed whole. One larger than the whole budget still runs
        # when it is alone in the step, or it could never run at all.
        return remaining if alone else 0

    def _allocate_or_preempt(
        self,
        seq: Sequence,
        num_new: int,
        index: int,
        preempted: list[Sequence],
        finished: list[Sequence],
    ) -> bool:
        """Allocate blocks for running ``seq``, preempting the newest unscheduled requests.

        Victims come from the tail of ``running`` (index > ``index``), so requests already
        scheduled this step are never touched. Returns False when ``seq`` itself had to go.
        """
        bm = self.block_manager
        while not bm.allocate_slots(seq, num_new):
            if len(self.running) - 1 > index:
                self._preempt(self.running.pop(), preempted)
                continue
            if index == 0:
                # Alone and still short: it needs more blocks than the pool holds.
                self.finish(seq, POOL_EXHAUSTED_REASON)
                finished.append(seq)
            else:
                self.running.pop()
                self._preempt(seq, preempted)
            return False
        return True

    def _preempt(self, seq: Sequence, preempted: list[Sequence]) -> None:
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self._enqueue(seq, front=True)
        preempted.append(seq)

    def _admit(
        self,
        i: int,
        scheduled: list[ScheduledSeq],
        budget: int,
        max_rank: int,
        preempted: list[Sequence],
        finished: list[Sequence],
    ) -> tuple[int, int]:
        """Admit waiting requests of rank <= ``max_rank`` in queue order, inserting them into
        ``running`` at ``i`` (before the requests not yet scheduled this step).

        Urgent requests (rank below batch) may preempt running batch requests for a slot or
        for blocks; batch requests only take what is free.
        """
        bm = self.block_manager
        urgent = max_rank < BATCH_RANK
        while self.waiting and budget > 0 and self.waiting[0].priority_rank <= max_rank:
            seq = self.waiting[0]
            if bm.blocks_needed(seq.num_tokens) > bm.num_blocks:
                # A preempted request whose output grew past the pool would block the queue forever.
                self.finish(seq, POOL_EXHAUSTED_REASON)
                finished.append(seq)
                continue
            if len(self.running) >= self.config.max_num_seqs:
                if urgent and self._preempt_batch(i, preempted):
                    continue
                break
            if not urgent and 0 < self.config.max_batch_seqs <= self._num_running_batch():
                break
            computed_blocks, num_cached = bm.get_computed_blocks(seq)
            num_new = self._num_new_tokens(seq, num_cached, budget, alone=not scheduled)
            if num_new == 0:
                break
            if not bm.allocate_slots(seq, num_new, computed_blocks):
                if urgent and self._preempt_batch(i, preempted):
                    continue  # blocks freed: look the prefix up again (eviction may have changed it)
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.insert(i, seq)
            i += 1
            scheduled.append(ScheduledSeq(seq, num_new))
            budget -= num_new
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
                self.admitted_by_rank[seq.priority_rank] += 1
                self.wait_s_by_rank[seq.priority_rank] += seq.first_scheduled_time - seq.arrival_time
        return i, budget

    def _only_idle_left(self) -> bool:
        """No request of any other class is running or waiting (both lists are in rank order)."""
        return ((not self.running or self.running[0].priority_rank >= IDLE_RANK)
                and (not self.waiting or self.waiting[0].priority_rank >= IDLE_RANK))

    def _num_running_batch(self) -> int:
        return sum(1 for s in self.running if s.priority_rank >= BATCH_RANK)

    def _preempt_batch(self, i: int, preempted: list[Sequence]) -> bool:
        """Preempt the newest running batch request not scheduled this step; False if none."""
        for j in range(len(self.running) - 1, i - 1, -1):
            if self.running[j].priority_rank >= BATCH_RANK:
                self._preempt(self.running.pop(j), preempted)
                return True
        return False

    def update_after_step(self, output: SchedulerOutput) -> None:
        """Advance progress for the computed tokens and publish newly full blocks to the cache."""
        bm = self.block_manager
        for s in output.scheduled:
            seq = s.seq
            if seq.status is not SequenceStatus.RUNNING:
                continue  # aborted between schedule() and now: its blocks are already gone
            seq.num_computed_tokens += s.num_new_tokens
            bm.cache_full_blocks(seq)


# A C-level key: the running list is re-sorted every step (already in order, a linear pass).
_rank = operator.attrgetter("priority_rank")
