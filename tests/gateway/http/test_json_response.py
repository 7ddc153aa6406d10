"""json_response: orjson bodies with the status and flags asked for."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from blink.gateway.http.json_response import json_response


def test_body_status_and_media_type() -> None:
    resp = json_response({"status": "dead", "backends": ["a"]}, 503)
    assert resp.status_code == 503 and resp.media_type == "application/json"
    assert orjson.loads(resp.body) == {"status": "dead", "backends": ["a"]}


def test_numpy_rows_need_the_flag() -> None:
    row = np.array([0.5, -1.0], dtype=np.float32)
    assert orjson.loads(json_response({"embedding": row}, option=orjson.OPT_SERIALIZE_NUMPY).body) == {"embedding": [0.5, -1.0]}
    with pytest.raises(TypeError):
        json_response({"embedding": row})
