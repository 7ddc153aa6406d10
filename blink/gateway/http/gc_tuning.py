"""The gateway process's cyclic-GC settings: fewer, cheaper collections on the request path.

Each streamed request leaves a few hundred short-lived container objects in reference cycles
(tasks, coroutine frames, exceptions with tracebacks), so with CPython's default gen-0 threshold
(700) a collection ran every few requests, and the gen-2 passes re-walked the objects the imports
and the app built at start-up. Freezing those and raising gen-0's threshold takes most of the GC
cost off each request (benchmarks/RESULTS.md, "Per-token and per-request trims").
"""

from __future__ import annotations

import gc

# Allocations (net of frees) between gen-0 collections: ~30 requests' worth instead of ~4. The
# garbage that waits meanwhile is bounded by it (20k small objects, a few MiB).
GEN0_THRESHOLD = 20_000


def tune_gc() -> None:
    """Call once, after the app is built and before serving: what exists now lives as long as
    the process, so it is moved out of the collector's sight (``gc.freeze``) and full
    collections stop re-walking it; gen-0 collections then run far less often."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


def freeze_loaded() -> None:
    """Call after a start-up load that happens once serving has begun (the cache's entries load in
    the app's lifespan, after ``tune_gc``): those objects live as long as the process too. A
    100k-entry cache is ~400k tracked objects, and a full collection walking them is a pause that
    would land in whichever requests were in flight (benchmarks/RESULTS.md, "Figures behind the code's numbers",
    gc_tuning). A no-op unless ``tune_gc`` froze the process
    already (the serving process), so tests and CLI tools keep CPython's default collector."""
    if gc.get_freeze_count():
        gc.collect()
        gc.freeze()
