"""The HTTP machinery every endpoint shares: dispatch, edge limits, errors, uvicorn's protocol."""
