"""Idle-time pre-computation of cache entries (blink/gateway/precompute/), under ``cache.precompute``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PrecomputeSettings(BaseModel):
    """Off by default: pre-computation spends tokens on answers nobody asked for yet, charged to the
    key whose entry it is (an ``openai_http`` tier bills them, and they count against that key's
    budget), and it makes the cache hold answers a user never saw generated. An operator turns it on
    knowingly, per server, once the trace shows repeats worth buying."""

    model_config = ConfigDict(extra="forbid")

    # Regenerate the most frequently hit entries before their TTL ends (needs a cache).
    refresh: bool = False
    # Learn which question follows which and pre-generate the likely next answer (needs the semantic cache).
    predict: bool = False
    # Tokens (prompt + completion) all pre-computation may spend per hour, across tenants: a
    # token bucket holding one hour's worth, so a quiet hour cannot bank more than that.
    tokens_per_hour: int = Field(200_000, ge=1)
    # Cache entries followed for refresh (their recipes and hit counts), least recently used dropped.
    max_tracked: int = Field(10_000, ge=1)
    # An entry is refreshed only once hit this often since it was (re)generated: one-off questions
    # are not worth their tokens again.
    refresh_min_hits: int = Field(2, ge=1)
    # Refresh within the last this-many seconds of an entry's TTL (10 min of the 24 h default).
    refresh_lead_s: float = Field(600.0, gt=0)
    # How often the hot entries are scanned for ones due.
    refresh_interval_s: float = Field(30.0, gt=0)
    # Live predicted entries at most (storage bound): past it, no new prediction until some expire.
    max_predicted: int = Field(1_000, ge=1)
    # A follow-up is predicted once seen at least this often after the cluster...
    predict_min_count: int = Field(2, ge=1)
    # ... and as at least this share of what followed it.
    predict_min_share: float = Field(0.3, gt=0.0, le=1.0)
    # Cosine at which two questions join one cluster (the cache's own embeddings; near the
    # semantic cache's 0.75 floor, a little stricter so a cluster's representative stays on topic).
    cluster_similarity: float = Field(0.8, gt=0.0, le=1.0)
    # Clusters kept per flow scope (tenant + model + parameters + system prompt), and scopes kept.
    max_clusters: int = Field(256, ge=1)
    max_scopes: int = Field(1_000, ge=1)
    # Jobs waiting for the idle lane; past it, new ones are dropped (counted), never queued unbounded.
    max_queue: int = Field(64, ge=1)
    # Each piece of a job's gateway-side work (building its prompt and embedding its question, then
    # writing its answer to the cache) waits until no user request is in flight and none arrived or
    # ended in the last this-many ms: those pieces share the cores with the users' parsing and embedding,
    # which the engine's idle lane cannot see. 200 ms spans a client's next request of a burst.
    quiet_ms: float = Field(200.0, ge=0.0)
