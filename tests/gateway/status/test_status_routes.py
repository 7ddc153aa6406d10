"""The server's own endpoints: /v1/models (list and retrieve), /version, /health, /ready, /metrics."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from live_server import LiveServer


@pytest.fixture(scope="module")
def http(gateway: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        yield client


def test_retrieve_model_with_the_openai_client(gateway: LiveServer) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    listed = client.models.list().data
    model = client.models.retrieve(listed[0].id)
    assert model.id == listed[0].id and model.object == "model"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("no-such-model")
    body = err.value.body
    assert isinstance(body, dict) and body["code"] == "model_not_found" and body["param"] == "model"


def test_model_ids_with_slashes_resolve_to_404_not_a_route_miss(http: httpx.Client) -> None:
    resp = http.get("/v1/models/org/no-such-model")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "model_not_found"


def test_version(http: httpx.Client) -> None:
    resp = http.get("/version")
    assert resp.status_code == 200
    version = resp.json()["version"]
    assert isinstance(version, str) and version


def test_liveness_readiness_and_metrics(http: httpx.Client) -> None:
    assert http.get("/health").json() == {"status": "ok"}
    ready = http.get("/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert all(b["ok"] for b in ready.json()["backends"].values())
    metrics = http.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert "blink_" in metrics.text


def test_status_routes_refuse_other_methods(http: httpx.Client) -> None:
    for path in ("/v1/models", "/version", "/health", "/ready", "/metrics"):
        resp = http.post(path, content=b"{}", headers={"content-type": "application/json"})
        assert resp.status_code == 405, (path, resp.status_code)
        assert resp.json()["error"]["type"] == "invalid_request_error"
