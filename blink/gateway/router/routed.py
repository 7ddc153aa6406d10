"""``RoutedBackend``: one served model name backed by tiers of replicas, behind one Backend.

Per request: the policy chain picks a tier; admission control admits it there, degrades it to
another tier, or sheds it (503 + retry-after); then attempts run until one yields a first
delta — replicas by affinity / peak-EWMA P2C, each attempt under first-token and stall
timeouts and the deadline, failed ones retried on another replica or tier, optionally hedged
at the replica's p95 TTFT. A cascade route holds the first tokens back and escalates when the
cheap tier is unsure. After the first delta reaches the client, a failure either continues on
a fallback (when ``continue_on_fallback``) or raises, so the client gets an explicit error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from blink.backends.base import Backend, Delta, GenerationRequest, Health, Load, ModelCard
from blink.gateway.resilience.admission import Ticket
from blink.gateway.resilience.hedge import HedgeConfig, Pump, race
from blink.gateway.resilience.retry import RetryPolicy
from blink.gateway.resilience.timeouts import DeadlineExceeded, FirstTokenTimeout, StreamTimeouts, remaining
from blink.gateway.router.affinity import block_hashes
from blink.gateway.router.attempt import Attempt
from blink.gateway.router.attempt_request import continuation, with_logprobs
from blink.gateway.router.cascade import CascadeConfig, ConfidenceProbe
from blink.gateway.router.policy import PolicyChain, RoutingPolicy, request_text
from blink.gateway.router.tier import Replica, Tier
from blink.obs import annotate, count
from blink.protocol.errors import BackendUnavailableError, BlinkError, OverloadedError


@dataclass(slots=True)
class RoutedConfig:
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeouts: StreamTimeouts = field(default_factory=StreamTimeouts)
    hedge: HedgeConfig = field(default_factory=HedgeConfig)
    cascade: CascadeConfig = field(default_factory=CascadeConfig)
    # After the first token, go on from the text already sent on another replica/tier instead
    # of ending the stream with an error.
    continue_on_fallback: bool = False
    # Queue-wait budget for requests that send no x-blink-latency-budget-ms (None = the queue
    # bound alone decides).
    default_budget_ms: float | None = None


@dataclass(slots=True)
class RouterCounters:
    retries: int = 0
    hedges: int = 0
    escalations: int = 0
    shed: int = 0
    continued: int = 0


@dataclass(slots=True)
class _Tries:
    count: int = 0
    tried: set[int] = field(default_factory=set)
    last_error: BaseException | None = None


class RoutedBackend:
    def __init__(
        self,
        name: str,
        tiers: Sequence[Tier],
        policies: Sequence[RoutingPolicy] = (),
        *,
        default_tier: str | None = None,
        config: RoutedConfig | None = None,
        owns_backends: bool = True,
    ) -> None:
        if not tiers:
            raise ValueError(f"routed model {name!r} has no tiers")
        self.name = name
        self.tiers = {t.name: t for t in tiers}
        self._by_cost = sorted(tiers, key=lambda t: t.cost)
        self.chain = PolicyChain(policies, default_tier or tiers[0].name)
        self.config = config or RoutedConfig()
        self.counters = RouterCounters()
        # False when the replicas are also served on their own names (the registry starts them).
        self._owns_backends = owns_backends
        self.replicas_changed()

    def replicas_changed(self) -> None:
        """Recompute what depends on the replica count (after discovery added or removed some)."""
        self._affinity = any(t.prefixes.config.enabled and len(t.replicas) > 1 for t in self._by_cost)

    # -- Backend protocol ---------------------------------------------------------------------

    def models(self) -> list[ModelCard]:
        return [ModelCard(id=self.name, owned_by="blink-router")]

    async def start(self) -> None:
        if self._owns_backends:
            for backend in self._backends():
                await backend.start()

    async def aclose(self) -> None:
        if self._owns_backends:
            await asyncio.gather(*(b.aclose() for b in self._backends()), return_exceptions=True)

    async def health(self) -> Health:
        checks = await asyncio.gather(*(b.health() for b in self._backends()), return_exceptions=True)
        ok = [isinstance(h, Health) and h.ok for h in checks]
        return Health(ok=any(ok), detail=f"{sum(ok)}/{len(ok)} replicas healthy")

    def load(self) -> Load:
        total = Load()
        for tier in self._by_cost:
            load = tier.load()
            total.running += load.running
            total.waiting += load.waiting
        return total

    def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        # The serving generator itself, not a wrapper around it: each layer is a resume per token.
        return self._serve(req)

    # -- internals ----------------------------------------------------------------------------

    def _backends(self) -> list[Backend]:
        unique = {id(r.backend): r.backend for t in self._by_cost for r in t.replicas}
        return list(unique.values())

    def _fallback_order(self, first: str) -> list[Tier]:
        """The chosen tier, then its peers, then smaller tiers (graceful degradation), then larger."""
        tier = self.tiers[first]
        same = [t for t in self._by_cost if t.cost == tier.cost and t is not tier]
        smaller = [t for t in reversed(self._by_cost) if t.cost < tier.cost]
        larger = [t for t in self._by_cost if t.cost > tier.cost]
        return [tier, *same, *smaller, *larger]

    async def _admit(self, req: GenerationRequest, order: list[Tier]) -> tuple[Ticket, int]:
        """A slot on the first tier in ``order`` that takes the request in time, else 503 at once."""
        for i, tier in enumerate(order):
            budget = req.latency_budget_ms if req.latency_budget_ms is not None else self.config.default_budget_ms
            ttft = tier.ttft_ms() if budget is not None and tier.admission.config.max_concurrency else None
            fut = tier.admission.try_enter(req.priority, budget, ttft)
            if fut is None:
                continue
            if fut.done():  # a free slot: admitted at once, no deadline timer to set and cancel
                return fut.result(), i
            try:
                async with asyncio.timeout(remaining(req.deadline)):
                    return await fut, i
            except TimeoutError:
                tier.admission.abandon(fut)
                raise DeadlineExceeded("The request's deadline passed while it waited for a slot.") from None
            except asyncio.CancelledError:
                tier.admission.abandon(fut)
                raise
        self.counters.shed += 1
        count("shed", reason="admission")
        retry_after = min(t.admission.retry_after_s() for t in order)
        raise OverloadedError(
            f"Model '{self.name}' is overloaded; retry in {retry_after} s.", headers={"retry-after": str(retry_after)}
        )

    async def _serve(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        route = await self.chain.choose(req, [t.view() for t in self._by_cost])
        annotate(tier=route.tier)  # the tier chosen, one of the configured names: a bounded label
        order = self._fallback_order(route.tier)
        hashes = block_hashes(request_text(req)) if self._affinity else []
        ticket, admitted = await self._admit(req, order)
        escalate = [self.tiers[n] for n in route.escalate_to] if admitted == 0 else []
        tiers = order[admitted:] + order[:admitted]
        t0 = time.perf_counter()
        cfg = self.config
        want_logprobs = req.options.logprobs
        tries = _Tries()
        current = req
        sent_text, sent_tokens, sent_any = "", 0, False
        attempt: Attempt | None = None
        try:
            while True:
                probing = bool(escalate) and not sent_any
                attempt, first = await self._first(with_logprobs(current) if probing else current, tiers, hashes, tries)
                count("router_decision", route=self.name, backend=attempt.replica.name)
                held = [first]
                if probing:
                    try:
                        keep, held = await self._probe(attempt, first, req.deadline)
                    except Exception as err:  # nothing reached the client yet: still transparent
                        attempt.fail(err)
                        await attempt.close()
                        tries.last_error = err
                        if not cfg.retry.retryable(err):
                            raise
                        continue
                    if not keep:
                        self.counters.escalations += 1
                        await attempt.close()
                        next_tier = escalate.pop(0)
                        count("escalation", source=attempt.tier.name, target=next_tier.name)
                        tiers = [next_tier, *(t for t in tiers if t is not next_tier)]
                        tries = _Tries(count=tries.count - 1)  # escalation is not a retry
                        continue
                for delta in held:
                    if not want_logprobs:
                        delta.logprobs = None
                    sent_any = True
                    sent_text += delta.text
                    sent_tokens += max(1, len(delta.token_ids)) if delta.text else 0
                    yield delta
                try:
                    while not attempt.finished:
                        nxt = await attempt.next(cfg.timeouts.stall_s, req.deadline)
                        if nxt is None:
                            break
                        if not want_logprobs:
                            nxt.logprobs = None
                        sent_text += nxt.text
                        sent_tokens += max(1, len(nxt.token_ids)) if nxt.text else 0
                        yield nxt
                except Exception as err:
                    attempt.fail(err)
                    await attempt.close()
                    if not self._may_continue(req, err, tries):
                        raise
                    self.counters.continued += 1
                    tries.last_error = err
                    current = continuation(req, sent_text, sent_tokens)
                    tiers = self._fallback_order(attempt.tier.name)
                    escalate = []
                    continue
                attempt.succeed()
                return
        finally:
            try:
                if attempt is not None:
                    await attempt.close()
            finally:
                ticket.release((time.perf_counter() - t0) * 1000.0)

    def _may_continue(self, req: GenerationRequest, err: BaseException, tries: _Tries) -> bool:
        return (
            self.config.continue_on_fallback
            and req.options.n == 1
            and req.prompts is None
            and (req.kind == "chat" or isinstance(req.prompt, str))
            and self.config.retry.retryable(err)
            and not isinstance(err, DeadlineExceeded)
            and self.config.retry.may_try(tries.count, req.deadline)
        )

    async def _probe(self, attempt: Attempt, first: Delta, deadline: float | None) -> tuple[bool, list[Delta]]:
        """Hold the first tokens back and judge them: (keep?, the held deltas)."""
        probe = ConfidenceProbe(self.config.cascade)
        verdict = probe.add(first)
        while verdict is None:
            delta = await attempt.next(self.config.timeouts.stall_s, deadline)
            verdict = probe.verdict() if delta is None else probe.add(delta)
        return verdict, probe.held

    async def _first(
        self, req: GenerationRequest, tiers: list[Tier], hashes: list[bytes], tries: _Tries
    ) -> tuple[Attempt, Delta]:
        """Attempts until one yields a first delta, across replicas then tiers; raises the last error."""
        retry = self.config.retry
        for tier in tiers:
            while retry.may_try(tries.count, req.deadline):
                replica = tier.pick(hashes, [r for r in tier.replicas if id(r) in tries.tried])
                if replica is None:
                    break
                tries.tried.add(id(replica))
                tries.count += 1
                if tries.count > 1:
                    self.counters.retries += 1
                hedge_after = self._hedge_delay(tier, replica, tries)
                attempt = Attempt(tier, replica, req, pumped=hedge_after is not None)
                try:
                    if hedge_after is None:
                        return attempt, await attempt.first(self.config.timeouts.first_token_s, req.deadline)
                    return await self._hedged(attempt, hedge_after, req, hashes, tries)
                except Exception as err:
                    attempt.fail(err)
                    await attempt.close()
                    tries.last_error = err
                    if not retry.retryable(err) or isinstance(err, DeadlineExceeded):
                        raise
                except BaseException:  # cancelled (client gone): free the replica and its generation
                    await attempt.close()
                    raise
            if not retry.may_try(tries.count, req.deadline):
                break
        raise self._exhausted(tries)

    def _hedge_delay(self, tier: Tier, replica: Replica, tries: _Tries) -> float | None:
        h = self.config.hedge
        if not h.enabled or len(tier.replicas) < 2 or len(replica.ttft) < h.min_samples:
            return None
        p = replica.ttft.percentile(h.quantile)
        return None if p is None else max(p, h.min_delay_ms) / 1000.0

    async def _hedged(
        self, primary: Attempt, hedge_after: float, req: GenerationRequest, hashes: list[bytes], tries: _Tries
    ) -> tuple[Attempt, Delta]:
        """Race ``primary`` and, past ``hedge_after``, a backup on another replica; close the loser."""
        first_s = self.config.timeouts.first_token_s
        backup: Attempt | None = None
        keep: Attempt | None = None
        try:
            winner = await race(_pump(primary), None, hedge_after)
            if winner is None and self.config.retry.may_try(tries.count, req.deadline):
                replica = primary.tier.pick(hashes, [r for r in primary.tier.replicas if id(r) in tries.tried])
                if replica is not None:
                    tries.tried.add(id(replica))
                    tries.count += 1
                    self.counters.hedges += 1
                    count("hedge", outcome="launched")
                    backup = Attempt(primary.tier, replica, req, pumped=True)
            if winner is None:
                left = remaining(req.deadline)
                limit = None if first_s is None else max(0.0, first_s - hedge_after)
                wait = limit if left is None else (left if limit is None else min(left, limit))
                winner = await race(_pump(primary), _pump(backup) if backup else None, wait)
            if winner is None:
                if backup is not None:
                    backup.fail(FirstTokenTimeout("hedge"))
                raise FirstTokenTimeout(f"No first token within {first_s:g} s (hedged).")
            chosen = primary if winner is primary.pump else backup
            other = backup if chosen is primary else primary
            if chosen is None:
                raise FirstTokenTimeout("hedge race lost its winner")
            try:
                first = await chosen.first(None, req.deadline)
                keep = chosen
            except Exception as err:
                if other is None:
                    raise
                chosen.fail(err)
                tries.last_error = err
                first = await other.first(first_s, req.deadline)
                keep = other
            return keep, first
        except Exception as err:
            if backup is not None:
                backup.fail(err)
            raise
        finally:
            # The loser (or both, on failure) is closed: its generation is aborted upstream.
            for attempt in (primary, backup):
                if attempt is not None and attempt is not keep and attempt is not primary:
                    await attempt.close()
            if keep is not None and keep is not primary:
                await primary.close()

    def _exhausted(self, tries: _Tries) -> BaseException:
        err = tries.last_error
        if isinstance(err, BlinkError):
            return err
        if err is not None:
            return BackendUnavailableError(f"Model '{self.name}' failed: {type(err).__name__}: {err}")
        # 5 s: the default breaker open time, when discovery has found no replica at all.
        open_s = max((r.breaker.config.open_s for t in self._by_cost for r in t.replicas), default=5.0)
        return BackendUnavailableError(
            f"No replica of model '{self.name}' is available (circuit breakers open, health checks failing "
            "or none discovered).",
            headers={"retry-after": str(max(1, round(open_s)))},
        )


def _pump(attempt: Attempt) -> Pump[Replica]:
    if attempt.pump is None:
        raise TypeError("a hedged attempt must run in a pump")
    return attempt.pump
