"""Routes from the YAML file: validation messages, and the RoutedBackend serve.py builds from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blink.backends.openai_http import OpenAIHTTPBackend
from blink.config.routing import ClassifierSettings
from blink.config.settings import ConfigError, load_settings
from blink.gateway.router.build import build_routed_backend

YAML = """
models:
  - {name: small, kind: openai_http, base_url: "http://127.0.0.1:9/v1"}
  - {name: big-a, kind: openai_http, base_url: "http://127.0.0.1:9/v1"}
  - {name: big-b, kind: openai_http, base_url: "http://127.0.0.1:9/v1"}
default_model: auto
routes:
  - name: auto
    tiers:
      - {name: small, replicas: [small]}
      - {name: large, replicas: [big-a, big-b], max_concurrency: 4, max_queue: 2}
    policies: [explicit, rules, classifier, latency_budget, cascade]
    rules: [{tier: large, has_code: true}]
    classifier: {labels: {simple: small, medium: large, complex: large}, min_margin: 0.01}
    latency_budget_ms: 800
    breaker: {error_rate: 0.4, open_s: 2}
    hedge: {enabled: true}
    continue_on_fallback: true
"""


def _letters(_: ClassifierSettings):  # type: ignore[no-untyped-def]
    return lambda texts: np.array([[t.count(c) + 1 for c in "aeiou"] for t in texts], dtype=np.float32)


def test_yaml_routes_build_a_routed_backend(tmp_path: Path) -> None:
    path = tmp_path / "blink.yaml"
    path.write_text(YAML)
    settings = load_settings(path)
    backends = {m.name: OpenAIHTTPBackend(m.name, m.base_url or "") for m in settings.models}
    routed = build_routed_backend(settings.routes[0], backends, embedder=_letters, owns_backends=False)
    assert routed.name == "auto" and list(routed.tiers) == ["small", "large"]
    assert [p.name for p in routed.chain.policies] == ["explicit", "rules", "classifier", "latency_budget", "cascade"]
    large = routed.tiers["large"]
    assert [r.name for r in large.replicas] == ["big-a", "big-b"] and large.cost == 1
    assert large.admission.config.max_concurrency == 4
    assert large.replicas[0].breaker.config.error_rate == 0.4
    assert routed.config.hedge.enabled and routed.config.continue_on_fallback
    assert routed.config.default_budget_ms == 800


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ('{name: auto, tiers: [{name: t, replicas: [nope]}]}', "not in 'models'"),
        ('{name: small, tiers: [{name: t, replicas: [small]}]}', "clashes"),
        ('{name: auto, tiers: [{name: t, replicas: [small]}], rules: [{tier: x}]}', "is not one of"),
        ('{name: auto, tiers: [{name: t, replicas: [small]}], policies: [classifier]}', "needs a 'classifier'"),
        ('{name: auto, tiers: [{name: t, replicas: [small]}], policies: [magic]}', "routes.0.policies"),
    ],
)
def test_invalid_routes_name_the_problem(tmp_path: Path, route: str, message: str) -> None:
    path = tmp_path / "blink.yaml"
    path.write_text('models: [{name: small, kind: openai_http, base_url: "http://127.0.0.1:9/v1"}]\nroutes: [' + route + "]\n")
    with pytest.raises(ConfigError, match=message):
        load_settings(path)
