"""A JSON response serialised with orjson, the one every endpoint returns its bodies with."""

from __future__ import annotations

import orjson
from starlette.responses import Response


def json_response(obj: object, status: int = 200, option: int = 0) -> Response:
    """``option``: orjson flags, e.g. ``orjson.OPT_SERIALIZE_NUMPY`` for embedding vectors."""
    return Response(orjson.dumps(obj, option=option), status_code=status, media_type="application/json")
