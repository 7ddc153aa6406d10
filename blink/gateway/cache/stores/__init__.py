"""``CacheStore`` implementations: in-process (+ SQLite file) and PostgreSQL + pgvector."""
