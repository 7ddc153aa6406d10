"""Idle-time pre-computation: cache entries made ready before the question (issue #27, item 2).

Two jobs, each switchable under ``cache.precompute`` and both bounded by one token budget:

- *refresh* (ledger.py): the entries users hit most are regenerated shortly before their TTL ends,
  so a popular answer never drops out of the cache and costs a user a full generation;
- *predict* (flows.py): which question cluster follows which, learned per tenant and flow scope
  from the cache's own embeddings, pre-generates the likely next turn of a live conversation into
  the very namespace that turn will look up.

Every job is an ordinary request replayed through the generation pipeline (runner.py) as the key
whose entry it is, in the engine's ``idle`` lane (below batch: it runs only in steps no user
request wants). So a pre-computed entry obeys the same model permission, budget, safety check,
namespace and hit guard as any other, and can never be served across tenants. service.py owns the
queue, the scan and the observer the pipeline calls; metrics.py the ``blink_precompute_*`` series.
"""
