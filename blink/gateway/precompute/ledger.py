"""The hot entries refresh follows: each entry's recipe, its hits since generated, its expiry."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from blink.gateway.precompute.recipe import Recipe


@dataclass(slots=True)
class _Tracked:
    recipe: Recipe
    expires_at: float
    hits: int = 0


class HotEntries:
    """Entries by (namespace, query): the pair an exact and a semantic hit both name.

    A semantic hit returns the neighbour's entry, whose key is not the request's; the entry's
    namespace and stored query identify it for either kind of hit. Bounded to ``limit`` entries,
    the least recently filled or hit dropped first.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[tuple[str, str], _Tracked] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def filled(self, ns: str, query: str, recipe: Recipe, expires_at: float) -> None:
        self._entries[(ns, query)] = _Tracked(recipe, expires_at)
        self._entries.move_to_end((ns, query))
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def hit(self, ns: str, query: str) -> None:
        tracked = self._entries.get((ns, query))
        if tracked is not None:
            tracked.hits += 1
            self._entries.move_to_end((ns, query))

    def take_due(self, now: float, lead_s: float, min_hits: int, limit: int) -> list[tuple[str, str, Recipe]]:
        """Up to ``limit`` entries expiring within ``lead_s`` and hit ``min_hits`` times, most hit
        first; their hit counts restart, so only an entry hit again is refreshed again.

        Entries already expired are forgotten: the cache dropped them, and the next user fill
        tracks them afresh.
        """
        expired = [k for k, t in self._entries.items() if t.expires_at <= now]
        for k in expired:
            del self._entries[k]
        due = [(t.hits, k) for k, t in self._entries.items() if t.hits >= min_hits and t.expires_at - now <= lead_s]
        due.sort(key=lambda item: -item[0])
        out = []
        for _, k in due[:limit]:
            tracked = self._entries[k]
            tracked.hits = 0
            out.append((k[0], k[1], tracked.recipe))
        return out

    def refreshed(self, ns: str, query: str, expires_at: float) -> None:
        tracked = self._entries.get((ns, query))
        if tracked is not None:
            tracked.expires_at = expires_at
