"""The server's own endpoints: the model list, version, liveness, readiness and metrics."""
