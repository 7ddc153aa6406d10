"""Resilience around one backend attempt: breakers, retries, timeouts, hedging, admission."""
