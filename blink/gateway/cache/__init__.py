"""Response cache: exact (hash of the normalised request) and semantic (embedding + hit guard).

Both share one ``CacheStore`` (``store.py``); ``stage.py`` is what the request path calls.
"""
