"""Routing: which tier (policies) and which replica (balancing, prefix affinity) serves a request."""
