"""The request path, grouped by noun (docs/architecture.md has the map).

- ``app.py`` assembles the route groups and declares the middleware chain once.
- Endpoints: ``chat/``, ``messages/``, ``responses/``, ``batch/``, ``precompute/``,
  ``dashboard/``, ``model_endpoints/``, ``status/``, ``voice_service.py``. A generating endpoint parses its
  request into a ``GenerationRequest``, calls ``GenerationPipeline.run`` and only renders.
- ``pipeline.py``: the one generation path; ``front.py``: the stages it runs and their lifecycle
  (``front_builder.py`` builds them from settings).
- Stages, independent of each other: ``auth/``, ``ratelimit/``, ``cost/``, ``cache/``,
  ``safety/``, ``router/`` (with ``resilience/``), ``compression/``.
- Shared machinery: ``rendering/`` (the response loop and each API's wire format), ``http/``
  (dispatch, edge limits, errors, uvicorn's protocol), ``storage/``.

The order is checked by the import-linter contracts in ``pyproject.toml``.
"""
