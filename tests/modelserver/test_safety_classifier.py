"""The safety filter's classifier check runs a model-server classifier (batched like any caller)."""

from __future__ import annotations

from pathlib import Path

import httpx
from live_server import LiveServer
from modelserver_helpers import model_server_settings

from blink.serve import build_app


def test_moderation_uses_the_served_classifier(onnx_dir: Path, tiny_classifier: Path) -> None:
    settings = model_server_settings(onnx_dir, tiny_classifier)
    # Any non-safe label above 1e-6 flags: the random classifier gives every label some probability.
    settings.safety = settings.safety.model_copy(update={"enabled": True, "classifier": "tiny-cls", "threshold": 1e-6})
    app = build_app(settings)
    served = app.state.model_server.get("tiny-cls", "classifier")
    with LiveServer(app) as server:
        before = served.batcher.stats.items
        r = httpx.post(f"{server.url}/v1/moderations", json={"input": ["hello there", "another text"]})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert all(res["flagged"] and res["categories"]["toxic"] and res["categories"]["spam"] for res in results)
        assert all(0 < res["category_scores"]["toxic"] < 1 and "safe" not in res["category_scores"] for res in results)
        assert all("hate" not in res["categories"] for res in results)  # no check covers OpenAI's categories
        assert served.batcher.stats.items == before + 2
