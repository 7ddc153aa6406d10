"""The synchronous engine core: schedule, run the model, sample, detokenise — once per step.

It owns no process or event loop; ``core_process`` drives it, and tests drive it directly.

A failure inside one request's share of a step (its sampling row, detokenising, stop matching,
logprobs, speculative verification) fails that request alone: it gets a final output with
``finish_reason="error"`` and a message free of tracebacks and paths (the traceback goes to the
log), and the step carries on for everyone else. Only the batched forward pass is shared by all.

Structured outputs (``SamplingParams.structured``): a request waits outside the scheduler until
its grammar is compiled (``structured.compiler``, on its own thread); each step then masks its
logit rows before sampling (``structured.masks``, filled during the forward; or, where that is
exact, samples first and masks only a refused row: ``structured.lazy``), its speculative
drafts are cut at the first one the grammar rejects, and every accepted token advances its
grammar, which allows EOS only where the output is complete.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path

import torch

from blink.engine.block_manager import BlockManager
from blink.engine.config import EngineConfig
from blink.engine.detokenizer import IncrementalDetokenizer
from blink.engine.errors import InvalidParameterError
from blink.engine.layers.smoothing import calibration_text
from blink.engine.loader import resolve_model_path
from blink.engine.model_runner import ModelRunner
from blink.engine.outputs import EngineStats, RequestOutput, TokenLogprobOut
from blink.engine.prompt_logprobs import prompt_token_logprobs
from blink.engine.request_checks import EngineLimits, check_request
from blink.engine.sampler import Sampler, SampleResult, with_logprobs
from blink.engine.sampling_params import SamplingParams
from blink.engine.scheduler import ScheduledSeq, Scheduler
from blink.engine.sequence import Sequence
from blink.engine.spec_decode.factory import build_speculator
from blink.engine.spec_decode.policy import SpecCounters
from blink.engine.spec_decode.speculator import Speculator
from blink.engine.stop import StopStringMatcher
from blink.engine.structured.compiler import GrammarCompiler
from blink.engine.structured.lazy import lazy_exact, resample_refused
from blink.engine.structured.masks import GrammarMasker, StepMask
from blink.engine.structured.matcher import GrammarState
from blink.engine.structured.spec import native_message
from blink.engine.tokenizer import Tokenizer

log = logging.getLogger("blink.engine")

# What a client is told when the engine failed its request (the details stay in the server log).
REQUEST_FAILED_MESSAGE = "The engine failed while processing this request; it was stopped. Other requests are unaffected."
# How long an idle step waits for a grammar still compiling before returning to the core loop
# (which then reads new requests): short enough not to delay them, long enough not to spin.
_COMPILE_POLL_S = 0.005


@dataclass
class _RequestState:
    """Per-request text state that the scheduler does not need."""

    seq: Sequence
    detok: IncrementalDetokenizer
    stops: StopStringMatcher | None
    text_emitted: int = 0
    new_ids: list[int] = field(default_factory=list)
    new_text: list[str] = field(default_factory=list)
    new_logprobs: list[TokenLogprobOut] = field(default_factory=list)
    # Prompt logprobs gathered so far (position 0 has none); sent once, when complete.
    prompt_logprobs: list[TokenLogprobOut | None] | None = None
    prompt_logprobs_sent: bool = False
    # The request's grammar position when it asked for structured output.
    grammar: GrammarState | None = None


class LLMEngine:
    """Continuous-batching engine over one model."""

    def __init__(self, config: EngineConfig, model_path: Path | None = None) -> None:
        self.config = config
        path = model_path or resolve_model_path(config.model, config.revision)
        config.model = str(path)
        self.tokenizer = Tokenizer.from_pretrained(path)
        # W8A8 calibrates its activation smoothing on a shipped text (layers/smoothing.py).
        calibration = self.tokenizer.encode(calibration_text()) if config.quantization == "int8-w8a8" else None
        self.runner = ModelRunner(config, model_path=path, calibration=calibration)
        self.max_model_len = self.runner.max_model_len
        self.block_manager = BlockManager(
            self.runner.num_blocks, self.runner.block_size, config.enable_prefix_caching, config.pinned_prefix_blocks
        )
        self.speculator = build_speculator(config, self.runner, lambda: self.scheduler.num_running)
        lookahead = self.speculator.lookahead if self.speculator is not None else None
        self.scheduler = Scheduler(config, self.block_manager, lookahead)
        self.sampler = Sampler()
        self._requests: dict[str, _RequestState] = {}
        # Structured outputs, built at the first constrained request (xgrammar loads only then).
        self._grammars: GrammarCompiler | None = None
        self._masker: GrammarMasker | None = None
        # Constrained requests whose grammar is still compiling: they join the scheduler when done.
        self._compiling: dict[str, Future[object]] = {}
        self._steps = 0
        self._last_batch = 0
        self.last_step_preemptions = 0

    # -- requests -------------------------------------------------------------------------

    @property
    def limits(self) -> EngineLimits:
        r = self.runner
        return EngineLimits(r.max_model_len, r.num_blocks, r.block_size, r.vocab_size)

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float | None = None,
    ) -> None:
        if request_id in self._requests:
            raise InvalidParameterError(f"Duplicate request id {request_id!r}.", param="request_id")
        check_request(prompt_token_ids, params, self.limits)
        eos = frozenset() if params.ignore_eos else self.tokenizer.eos_token_ids
        seq = Sequence(request_id, list(prompt_token_ids), params, eos, arrival_time or time.monotonic())
        detok = IncrementalDetokenizer(self.tokenizer, seq.prompt_token_ids, params.skip_special_tokens)
        stops = StopStringMatcher(list(params.stop), params.include_stop_str_in_output) if params.stop else None
        state = _RequestState(seq, detok, stops)
        if params.prompt_logprobs is not None:
            state.prompt_logprobs = [None]
        self._requests[request_id] = state
        if params.structured is not None:
            kind, spec = params.structured
            self._compiling[request_id] = self._grammar_compiler().get(str(kind), str(spec), params.structured_engine)
            return
        self.scheduler.add(seq)

    def _grammar_compiler(self) -> GrammarCompiler:
        if self._grammars is None:
            eos = sorted(self.tokenizer.eos_token_ids)
            self._grammars = GrammarCompiler(self.tokenizer.hf, self.runner.vocab_size, eos,
                                             engine=self.config.structured_engine)
            self._masker = GrammarMasker(self.runner.vocab_size)
        return self._grammars

    def _admit_compiled(self, wait: bool) -> list[RequestOutput]:
        """Move requests whose grammar is ready into the scheduler; reject those that failed.

        ``wait``: nothing else to do this step, so block briefly for a compile to finish.
        """
        if not self._compiling:
            return []
        if wait:
            wait_futures(list(self._compiling.values()), timeout=_COMPILE_POLL_S, return_when=FIRST_COMPLETED)
        outputs: list[RequestOutput] = []
        for request_id, fut in list(self._compiling.items()):
            if not fut.done():
                continue
            del self._compiling[request_id]
            state = self._requests.get(request_id)
            if state is None:  # aborted while compiling
                continue
            try:
                kind = str(state.seq.params.structured[0]) if state.seq.params.structured else ""
                engine = state.seq.params.structured_engine
                extra = self._grammars.extra_mask(kind, engine) if self._grammars is not None else None
                state.grammar = GrammarState(fut.result(), extra)  # type: ignore[arg-type]
            except Exception as exc:
                log.info("request %s: its grammar did not compile: %s", request_id, native_message(exc))
                if isinstance(exc, InvalidParameterError):  # the spec's own fault: the client's 400
                    outputs.append(self._reject(state, str(exc), exc.param))
                    continue
                outputs.append(self._reject(state, f"request rejected: the structured output spec did not "
                                                   f"compile: {native_message(exc)}"))
                continue
            self.scheduler.add(state.seq)
        return outputs

    def abort_request(self, request_id: str) -> bool:
        """Drop a request and free its blocks now; True when it was live."""
        state = self._requests.pop(request_id, None)
        self._compiling.pop(request_id, None)
        if state is None:
            return False
        self.scheduler.abort(request_id)
        if self.speculator is not None:
            self.speculator.release(request_id)
        return True

    def has_unfinished(self) -> bool:
        return bool(self._requests)

    def lazy_mask_counts(self) -> tuple[int, int]:
        """Constrained samples drawn before masking (``structured.lazy``) so far, and how many of
        them the grammar refused (each then cost a mask fill after the forward and a second draw)."""
        if self._masker is None:
            return 0, 0
        return self._masker.lazy_checked, self._masker.lazy_refused

    def close(self) -> None:
        """Stop the grammar threads (if any were started); the engine is unusable afterwards."""
        if self._grammars is not None:
            self._grammars.close()
        if self._masker is not None:
            self._masker.close()

    # -- the step ---------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        outputs: list[RequestOutput] = self._admit_compiled(wait=self.scheduler.num_running == 0
                                                            and self.scheduler.num_waiting == 0)
        out = self.scheduler.schedule()
        self._steps += 1
        self._last_batch = len(out.scheduled)
        self.last_step_preemptions = len(out.preempted)
        for seq in out.finished:  # ended by the scheduler (outgrew the KV pool); blocks already freed
            state = self._requests.get(seq.request_id)
            if state is not None:
                try:
                    self._flush_text(state, stop_hit=False)
                    outputs.append(self._emit(state))
                except Exception:
                    outputs.append(self._fail(state, "finishing"))
        if not out.scheduled:
            return outputs
        if self.speculator is not None:
            self.speculator.propose(out.scheduled)
        # Grammar masks first: checking drafts against a grammar may drop some, which changes the
        # item's logit rows. Then read the rest before anything below changes them (recording
        # prompt logprobs ends the pending state).
        mask = self._start_masks(out.scheduled)
        counts = [item.num_logits for item in out.scheduled]
        starts = [item.seq.num_computed_tokens for item in out.scheduled]
        logits = self.runner.execute(out.scheduled)
        if mask is not None:
            mask.apply(logits)
        self.scheduler.update_after_step(out)
        # Logit rows per scheduled sequence: its last token, then one per speculative token (or
        # one per token while its prompt logprobs are pending; the last is the sampling row).
        first_row: list[int] = []
        total = 0
        for count in counts:
            first_row.append(total)
            total += count
        for i, item in enumerate(out.scheduled):
            if item.seq.prompt_logits_pending:
                rows = logits[first_row[i] : first_row[i] + counts[i]]
                failed = self._record_prompt_logprobs(item, starts[i], rows)
                if failed is not None:
                    outputs.append(failed)
        plain = [
            i
            for i, s in enumerate(out.scheduled)
            if not s.spec_token_ids and s.seq.num_computed_tokens == s.seq.num_tokens
        ]
        if plain:
            seqs = [out.scheduled[i].seq for i in plain]
            rows = [first_row[i] + counts[i] - 1 for i in plain]
            sample_logits = logits if len(rows) == total else logits[rows]
            results = self._sample_each(sample_logits, seqs)
            if mask is not None and mask.lazy and self._masker is not None:
                try:
                    self._masker.count_lazy(*resample_refused(mask, logits, rows, seqs, results, self._sample_each))
                except Exception:  # only the lazily sampled requests fail, not the step
                    log.exception("masking refused lazy samples failed")
                    lazy_rows = {row for row, _ in mask.lazy}
                    results = [None if row in lazy_rows else res for row, res in zip(rows, results, strict=True)]
            for seq, res in zip(seqs, results, strict=True):
                state = self._requests.get(seq.request_id)
                if state is None:  # aborted between schedule and now
                    continue
                if res is None:  # its traceback is logged already
                    outputs.append(self._fail(state, "sampling", trace=False))
                    continue
                try:
                    self._accept_token(state, res.token_id)
                    if seq.params.logprobs is not None:
                        state.new_logprobs.append(
                            TokenLogprobOut(res.token_id, float(res.logprob or 0.0), res.top_logprobs)
                        )
                    outputs.append(self._emit(state))
                except Exception:
                    outputs.append(self._fail(state, "accepting a token"))
        for i, item in enumerate(out.scheduled):
            if item.spec_token_ids:
                start = first_row[i]
                spec_logits = logits[start : start + 1 + len(item.spec_token_ids)]
                try:
                    emitted = self._accept_speculated(self.speculator, item, spec_logits)
                except Exception:
                    state = self._requests.get(item.seq.request_id)
                    emitted = self._fail(state, "verifying speculation") if state is not None else None
                if emitted is not None:
                    outputs.append(emitted)
            elif item.num_lookahead:
                self.scheduler.commit_speculation(item.seq, 0)  # release the unused reserved slots
        return outputs

    def _record_prompt_logprobs(self, item: ScheduledSeq, start: int, logits: torch.Tensor) -> RequestOutput | None:
        """Keep the logprobs of the prompt tokens this chunk's rows predict; an error output if
        that fails. Positions already recorded (a recompute after preemption) are skipped."""
        seq = item.seq
        state = self._requests.get(seq.request_id)
        if state is None or state.prompt_logprobs is None:
            return None
        done = len(state.prompt_logprobs)
        # Row j predicts the token at start + j + 1; keep prompt positions not recorded yet.
        first, last = max(done, start + 1), min(seq.num_prompt_tokens, start + item.num_new_tokens + 1)
        try:
            if first < last:
                rows = logits[first - start - 1 : last - start - 1]
                targets = seq.token_ids[first:last]
                state.prompt_logprobs.extend(prompt_token_logprobs(rows, targets, seq.params.prompt_logprobs or 0))
        except Exception:
            return self._fail(state, "computing prompt logprobs")
        if len(state.prompt_logprobs) >= seq.num_prompt_tokens:
            seq.prompt_logits_pending = False
        return None
    def _start_masks(self, scheduled: list[ScheduledSeq]) -> StepMask | None:
        """Grammar masks of this step's constrained rows: speculative rows now (a draft the grammar
        rejects is dropped before the forward, with every draft after it), the rest on the mask
        thread while the model runs. None when no scheduled request is constrained."""
        if self._masker is None:
            return None
        grammars = [self._grammar_of(item.seq) for item in scheduled]
        if not any(g is not None for g in grammars):
            return None
        # Logit rows as the step lays them out (ScheduledSeq.num_logits): an item's sampling rows
        # (its last token's, then one per draft) are its last ones; earlier rows (prompt
        # logprobs) are never sampled and stay unmasked.
        mask = self._masker.new_mask(sum(item.num_logits for item in scheduled))
        deferred: list[tuple[int, GrammarState]] = []
        base = 0
        for item, grammar in zip(scheduled, grammars, strict=True):
            row = base + item.num_logits - 1 - len(item.spec_token_ids)
            if grammar is not None and item.spec_token_ids:
                try:
                    kept = grammar.check_drafts(item.spec_token_ids, mask.bitmask, row)
                except Exception:  # this request alone fails: its all-forbidden row fails the accept
                    log.exception("request %s: checking drafts against its grammar failed", item.seq.request_id)
                    kept = 0
                    mask.bitmask[row] = 0
                del item.spec_token_ids[kept:]
                mask.rows.extend(range(row, row + 1 + kept))
            elif grammar is not None:
                if self.config.structured_lazy_mask and lazy_exact(item.seq.params) and grammar.lazy.lazy_now():
                    mask.lazy.append((row, grammar))  # sampled unmasked first (structured.lazy)
                else:
                    deferred.append((row, grammar))
            base += item.num_logits  # after any drafts were dropped
        self._masker.start(mask, deferred)
        return mask

    def _grammar_of(self, seq: Sequence) -> GrammarState | None:
        state = self._requests.get(seq.request_id)
        return state.grammar if state is not None else None

    def _sample_each(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[SampleResult | None]:
        """One batched draw; if it fails, each row alone, so only the rows that fail again are lost."""
        try:
            return list(self.sampler.sample(logits, seqs))
        except Exception:
            log.exception("batched sampling failed; retrying the %d rows one by one", len(seqs))
        results: list[SampleResult | None] = []
        for i, seq in enumerate(seqs):
            try:
                results.append(self.sampler.sample(logits[i : i + 1], [seq])[0])
            except Exception:
                log.exception("sampling failed for request %s", seq.request_id)
                results.append(None)
        return results

    def _reject(self, state: _RequestState, message: str, param: str | None = None) -> RequestOutput:
        """End a request that never reached the scheduler, with a message written for the client
        (``param``: the field at fault, when the request itself was bad)."""
        seq = state.seq
        self._requests.pop(seq.request_id, None)
        return RequestOutput(request_id=seq.request_id, new_token_ids=[], text="", finished=True,
                             finish_reason="error", num_prompt_tokens=seq.num_prompt_tokens, error=message,
                             error_param=param)

    def _fail(self, state: _RequestState, stage: str, trace: bool = True) -> RequestOutput:
        """End one request with an error output and free its blocks; the step goes on.

        Called from an ``except`` block, so the log line carries the traceback; the client's
        message carries none of it.
        """
        seq = state.seq
        log.error("request %s failed in the engine while %s", seq.request_id, stage, exc_info=trace)
        self._requests.pop(seq.request_id, None)
        self.scheduler.abort(seq.request_id)
        if self.speculator is not None:
            self.speculator.release(seq.request_id)
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=[],
            text="",
            finished=True,
            finish_reason="error",
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            error=REQUEST_FAILED_MESSAGE,
        )

    def _accept_speculated(
        self, speculator: Speculator | None, item: ScheduledSeq, logits: torch.Tensor
    ) -> RequestOutput | None:
        """Verify one sequence's proposals and append what survives, stopping at a stop token."""
        seq = item.seq
        state = self._requests.get(seq.request_id)
        if state is None or speculator is None:  # aborted between schedule and now
            return None
        verdict = speculator.verify(item, logits)
        appended = 0
        for token_id in verdict.token_ids:
            self._accept_token(state, token_id)
            appended += 1
            if seq.finish_reason is not None:
                break
        if seq.params.logprobs is not None:
            kept = verdict.token_ids[:appended]
            results = with_logprobs(logits[:appended], kept, [seq.params] * appended)
            state.new_logprobs.extend(
                TokenLogprobOut(r.token_id, float(r.logprob or 0.0), r.top_logprobs) for r in results
            )
        # Every appended token but the last had its KV computed in this forward.
        self.scheduler.commit_speculation(seq, appended - 1)
        return self._emit(state)

    def _accept_token(self, state: _RequestState, token_id: int) -> None:
        seq = state.seq
        params = seq.params
        if state.grammar is not None and not state.grammar.accept(token_id):
            raise RuntimeError(f"token {token_id} was sampled against the request's grammar")
        seq.append_token(token_id)
        state.new_ids.append(token_id)
        n_out = seq.num_output_tokens
        reason: str | None = None
        stop_reason: str | int | None = None
        min_ok = n_out > params.min_tokens or params.min_tokens == 0
        if token_id in params.stop_token_ids and min_ok:
            reason, stop_reason = "stop", token_id
        elif token_id in seq.eos_token_ids and min_ok:
            reason = "stop"
        else:
            delta = state.detok.add(token_id)
            if state.stops is not None:
                delta, hit = state.stops.feed(delta)
                if hit:
                    reason, stop_reason = "stop", state.stops.matched
            if delta:
                state.new_text.append(delta)
        if reason is None and state.grammar is not None and state.grammar.terminated:
            reason = "stop"  # the grammar is complete and accepted its end (a stop token)
        if reason is None:
            if params.max_tokens is not None and n_out >= params.max_tokens:
                reason = "length"
            elif seq.num_tokens >= self.max_model_len:
                reason = "length"
        if reason is not None:
            self._flush_text(state, stop_hit=state.stops is not None and state.stops.stopped)
            seq.stop_reason = stop_reason
            self.scheduler.finish(seq, reason)

    @staticmethod
    def _flush_text(state: _RequestState, stop_hit: bool) -> None:
        """At the end, release text held back for an unfinished character or a partial stop string."""
        if stop_hit:
            return
        tail = state.detok.flush()
        if state.stops is not None:
            tail, _ = state.stops.feed(tail)
            tail += state.stops.flush()
        if tail:
            state.new_text.append(tail)

    def _emit(self, state: _RequestState) -> RequestOutput:
        seq = state.seq
        finished = seq.finish_reason is not None
        out = RequestOutput(
            request_id=seq.request_id,
            new_token_ids=state.new_ids,
            text="".join(state.new_text),
            finished=finished,
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            num_output_tokens=seq.num_output_tokens,
            logprobs=state.new_logprobs or None,
        )
        if state.prompt_logprobs is not None and not state.prompt_logprobs_sent and not seq.prompt_logits_pending:
            out.prompt_logprobs = state.prompt_logprobs
            state.prompt_logprobs_sent = True
        state.new_ids, state.new_text, state.new_logprobs = [], [], []
        if finished:
            self._requests.pop(seq.request_id, None)
            if self.speculator is not None:
                self.speculator.release(seq.request_id)
        return out

    def stats(self) -> EngineStats:
        bm = self.block_manager
        spec = self.speculator.policy.counters if self.speculator is not None else SpecCounters()
        return EngineStats(
            num_running=self.scheduler.num_running,
            num_waiting=self.scheduler.num_waiting,
            kv_usage=bm.usage,
            prefix_cache_hit_rate=bm.prefix_cache_hit_rate,
            num_blocks=self.runner.num_blocks,
            steps=self._steps,
            batch_size=self._last_batch,
            spec_acceptance_rate=spec.acceptance_rate,
            spec_tokens_per_step=spec.tokens_per_step,
            spec_proposed_tokens=spec.proposed,
            spec_accepted_tokens=spec.accepted,
            waiting_by_class=self.scheduler.waiting_by_rank(),
            running_by_class=self.scheduler.running_by_rank(),
            admitted_by_class=list(self.scheduler.admitted_by_rank),
            queue_wait_s_by_class=list(self.scheduler.wait_s_by_rank),
        )

    # -- convenience for tests and offline use ---------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Run prompts to completion; returns generated token ids per prompt."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        ids = [f"gen-{self._steps}-{i}" for i in range(len(prompts))]
        for rid, p, sp in zip(ids, prompts, plist, strict=True):
            self.add_request(rid, p, sp)
        tokens: dict[str, list[int]] = {rid: [] for rid in ids}
        while self.has_unfinished():
            for o in self.step():
                tokens[o.request_id].extend(o.new_token_ids)
        return [tokens[r] for r in ids]
