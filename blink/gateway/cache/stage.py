"""The cache stage of the request path: look up before the backend, fill after the response.

Lookup order: exact key, then (if on) the semantic index of the request's namespace with the
hit guard. A miss carries the key, namespace and embedding so the fill after the response
does not compute them again. Fills run as background tasks, off the hot path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from blink.backends.base import GenerationRequest
from blink.config.gateway import CacheSettings
from blink.gateway.cache import keys
from blink.gateway.cache.entry import CachedChoice, CachedResponse
from blink.gateway.cache.store import CacheStore
from blink.gateway.http.gc_tuning import freeze_loaded

log = logging.getLogger("blink.cache")

# Candidates the guard examines: the best neighbour can be a trap while the second is a true repeat.
_NEIGHBOURS = 4


class SemanticMatcher(Protocol):
    """Embeds a query and decides whether a neighbour may be served for it."""

    threshold: float

    async def embed(self, text: str) -> np.ndarray: ...

    def accept(self, query: str, cached_query: str, score: float) -> bool: ...


@dataclass(slots=True)
class CacheDirectives:
    """Per-request switches: body ``cache: false``; ``Cache-Control: no-cache`` / ``no-store``."""

    lookup: bool = True
    store: bool = True
    # Set only by the server's own idle-lane jobs (gateway/precompute/): the fill is marked with it.
    origin: str = ""

    @classmethod
    def from_request(cls, cache_field: Any, cache_control: str) -> CacheDirectives:
        d = cls()
        if cache_field is False:
            d.lookup = d.store = False
        tokens = {t.strip().lower() for t in cache_control.split(",")}
        if "no-cache" in tokens:
            d.lookup = False
        if "no-store" in tokens:
            d.lookup = d.store = False
        return d


@dataclass(slots=True)
class CacheLookup:
    outcome: str  # exact | semantic | miss | bypass
    entry: CachedResponse | None = None
    similarity: float | None = None
    ns: str = ""
    key: bytes = b""
    vec: np.ndarray | None = None
    query: str = ""
    fill: bool = False
    origin: str = ""

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [(b"x-blink-cache", self.outcome.encode())]
        if self.similarity is not None:
            out.append((b"x-blink-cache-similarity", f"{self.similarity:.4f}".encode()))
        if self.entry is not None and self.entry.precomputed:
            out.append((b"x-blink-precomputed", self.entry.precomputed.encode()))
        return out


@dataclass
class ResponseCache:
    store: CacheStore
    settings: CacheSettings
    matcher: SemanticMatcher | None = None
    _pending: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        await self.store.start()
        freeze_loaded()  # the loaded entries outlive every request: keep full collections off them

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.store.aclose()

    def _cacheable(self, req: GenerationRequest) -> bool:
        o = req.options
        if o.logprobs or o.prompt_logprobs is not None or o.return_token_ids:
            return False  # logprobs and token ids are not stored, so a replay could not honour them
        if req.prompts is not None:
            return False  # the keys describe one prompt
        opts = req.extra.get("stream_options")
        if isinstance(opts, dict) and opts.get("continuous_usage_stats"):
            return False  # a replay has no per-token counts for usage in every chunk
        return keys.is_deterministic(req) or not self.settings.deterministic_only

    async def lookup(self, req: GenerationRequest, tenant: str, directives: CacheDirectives,
                     before_embed: Callable[[], None] | None = None) -> CacheLookup:  # fmt: skip
        """``before_embed`` runs once the answer depends on an embedding (the exact probe missed or
        was skipped): the head start (head_start.py) opens the backend call there."""
        if not self._cacheable(req) or not (directives.lookup or directives.store):
            return CacheLookup("bypass")
        context, query = keys.split_query(req)
        ns = keys.namespace(tenant, req, context)
        key = keys.exact_key(tenant, req)
        result = CacheLookup("miss", ns=ns, key=key, query=query, fill=directives.store, origin=directives.origin)
        semantic = self._semantic_allowed(req, query)
        if not directives.lookup:
            result.outcome = "bypass"
            if semantic and directives.store:
                if before_embed is not None:
                    before_embed()
                result.vec = req.embedding = await self.matcher.embed(query) if self.matcher else None
            return result
        hit = await self.store.get_exact(ns, key)
        if hit is not None:
            return CacheLookup("exact", entry=hit, ns=ns, key=key)
        if not semantic:
            return result
        matcher = self.matcher
        if matcher is None:
            return result
        if before_embed is not None:
            before_embed()
        result.vec = req.embedding = await matcher.embed(query)  # the router's classifier reuses it
        for score, cand in await self.store.nearest(ns, result.vec, _NEIGHBOURS):
            if score < matcher.threshold:
                break
            if matcher.accept(query, cand.query, score):
                return CacheLookup("semantic", entry=cand, similarity=score, ns=ns, key=key)
        return result

    def _semantic_allowed(self, req: GenerationRequest, query: str) -> bool:
        if self.matcher is None or not self.settings.semantic.enabled or not query:
            return False
        if req.options.echo:
            return False  # the answer repeats its own prompt: a neighbour's would show the wrong one
        return self.settings.semantic.tool_requests or not keys.uses_tools(req)

    def in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` off the request path (a discarded head start's close); ``drain`` waits for it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def schedule_fill(self, lookup: CacheLookup, rendered: dict[str, Any]) -> None:
        """Store a finished response in the background (never delays the client)."""
        if not lookup.fill:
            return
        task = asyncio.get_running_loop().create_task(self._fill(lookup, rendered))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _fill(self, lookup: CacheLookup, rendered: dict[str, Any]) -> None:
        entry = entry_from_rendered(rendered, lookup.query)
        if entry is None:
            return
        entry.precomputed = lookup.origin
        try:
            await self.store.put(lookup.ns, lookup.key, lookup.vec, entry, self.settings.ttl_s)
        except Exception:
            log.exception("cache fill failed")

    async def drain(self) -> None:
        """Wait for pending fills (tests, shutdown)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)


def entry_from_rendered(rendered: dict[str, Any], query: str) -> CachedResponse | None:
    """A finished OpenAI response body -> what the cache keeps; None if a choice did not finish."""
    choices: list[CachedChoice] = []
    for c in rendered.get("choices", []):
        if c.get("finish_reason") is None:
            return None
        if "message" in c:
            msg = c["message"]
            choices.append(CachedChoice(msg.get("content") or "", c["finish_reason"], msg.get("tool_calls")))
        else:
            choices.append(CachedChoice(c.get("text") or "", c["finish_reason"]))
    if not choices:
        return None
    usage = rendered.get("usage") or {}
    return CachedResponse(
        kind="chat" if rendered.get("object", "").startswith("chat") else "completion",
        choices=choices,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=int(usage.get("completion_tokens", 0)),
        query=query,
    )
