"""The Grafana dashboard in deploy/ references only series Blink exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from blink.backends.base import Load
from blink.obs.metrics import GatewayMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "blink.json"
_SERIES = re.compile(r"\b((?:vllm:|blink_)[a-zA-Z0-9_:]+)")


def exported_names() -> set[str]:
    """Every sample name the gateway can expose (histogram/counter suffixes included)."""
    loads = [("m", Load(running=1, waiting=0, kv_usage=0.5, prefix_cache_hit_rate=0.5))]
    text = GatewayMetrics(lambda: loads).render().decode()
    names: set[str] = set()
    suffixes = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",), "gauge": ("",)}
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names


def dashboard_exprs() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in data["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def test_dashboard_references_only_exported_series() -> None:
    exported = exported_names()
    used = {name for expr in dashboard_exprs() for name in _SERIES.findall(expr)}
    assert len(used) >= 15
    missing = sorted(used - exported)
    assert not missing, f"the Grafana dashboard queries series Blink does not export: {missing}"


def test_gauges_no_backend_reports_yet_still_exist_as_families() -> None:
    # Spec-decode acceptance and batch size have no reporter in Load yet; their families exist so
    # the dashboard's queries are valid (and empty) until one does.
    assert {"blink_spec_decode_acceptance_rate", "blink_engine_batch_size"} <= exported_names()
