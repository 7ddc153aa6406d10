"""Per-key and per-model rate limits and the per-key concurrent-sequence quota."""
