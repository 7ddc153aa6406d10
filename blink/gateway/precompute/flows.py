"""Conversation flows: which question cluster follows which, per tenant and flow scope.

A scope is a tenant + model + parameters + system prompt hash (``keys.namespace`` over the system
messages only): flows learned from one tenant's users never shape another's predictions, and a
support bot's flows never a coding bot's. Questions are clustered online by the cache's own
embeddings (a leader clustering: join the nearest centroid at ``similarity`` or found a new
cluster), and a cluster keeps the first question that founded it as its representative, the
text a prediction asks.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class _Cluster:
    centroid: np.ndarray
    text: str
    size: int = 1
    followers: Counter[int] = field(default_factory=Counter)


class _Scope:
    def __init__(self) -> None:
        self.clusters: list[_Cluster] = []
        self.matrix = np.zeros((0, 0), dtype=np.float32)  # unit centroids, one row per cluster
        # Texts already placed: an exact cache hit computes no embedding, its text finds its cluster.
        self.texts: OrderedDict[str, int] = OrderedDict()

    def remember(self, text: str, cluster: int, limit: int) -> None:
        self.texts[text] = cluster
        self.texts.move_to_end(text)
        while len(self.texts) > limit:
            self.texts.popitem(last=False)

    def nearest(self, vec: np.ndarray) -> tuple[int, float]:
        if not self.clusters:
            return -1, -1.0
        scores = self.matrix @ vec
        best = int(np.argmax(scores))
        return best, float(scores[best])


def _unit(vec: np.ndarray) -> np.ndarray:
    v = np.asarray(vec, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


class FlowModel:
    def __init__(self, similarity: float, max_clusters: int, max_scopes: int) -> None:
        self.similarity = similarity
        self.max_clusters = max_clusters
        self.max_scopes = max_scopes
        self._scopes: OrderedDict[str, _Scope] = OrderedDict()

    def assign(self, scope: str, vec: np.ndarray | None, text: str) -> int | None:
        """The cluster ``text`` belongs to in ``scope`` (founding one if none is near), or None
        when the scope is full and nothing is near (a new topic then simply is not learned), or
        when there is no vector and the text was never seen."""
        s = self._scopes.get(scope)
        if s is None:
            s = self._scopes[scope] = _Scope()
            while len(self._scopes) > self.max_scopes:
                self._scopes.popitem(last=False)
        self._scopes.move_to_end(scope)
        known = s.texts.get(text)
        if known is not None:
            s.remember(text, known, 4 * self.max_clusters)
            return known
        if vec is None:
            return None
        cluster = self._place(s, _unit(vec), text)
        if cluster is not None:
            s.remember(text, cluster, 4 * self.max_clusters)
        return cluster

    def _place(self, s: _Scope, v: np.ndarray, text: str) -> int | None:
        best, score = s.nearest(v)
        if best >= 0 and score >= self.similarity:
            c = s.clusters[best]
            c.size += 1
            c.centroid = _unit(c.centroid + (v - c.centroid) / c.size)  # running mean, kept unit
            s.matrix[best] = c.centroid
            return best
        if len(s.clusters) >= self.max_clusters:
            return None
        s.clusters.append(_Cluster(v, text))
        s.matrix = np.vstack([s.matrix.reshape(-1, len(v)), v[None, :]])
        return len(s.clusters) - 1

    def observe(self, scope: str, before: int, after: int) -> None:
        """A question of cluster ``after`` followed one of ``before`` in a conversation."""
        s = self._scopes.get(scope)
        if s is not None and 0 <= before < len(s.clusters) and 0 <= after < len(s.clusters):
            s.clusters[before].followers[after] += 1

    def likely_next(self, scope: str, cluster: int, min_count: int, min_share: float) -> str | None:
        """The representative question of the cluster that most often followed ``cluster``, when it
        did so at least ``min_count`` times and as ``min_share`` of all that followed; else None."""
        s = self._scopes.get(scope)
        if s is None or not 0 <= cluster < len(s.clusters):
            return None
        followers = s.clusters[cluster].followers
        if not followers:
            return None
        nxt, count = followers.most_common(1)[0]
        if count < min_count or count < min_share * sum(followers.values()):
            return None
        return s.clusters[nxt].text
