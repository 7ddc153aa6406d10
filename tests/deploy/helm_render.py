"""Render the Helm chart offline (PyPI helm-python-sdk) and look things up in the result."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import helm_python
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "blink"
RELEASE = "rel"
NAMESPACE = "prod"
# The Kubernetes version the manifests are validated against (kubernetes-validate --strict -k).
KUBE_VERSION = "1.32.0"
# Kinds whose schema is a CRD (not in kubernetes-validate's built-in schemas).
CRD_KINDS = {"ServiceMonitor"}

STORES_SECRET = {"name": "stores", "key": "url"}
# Value combinations every test runs over: each wires the chart a different way.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "hpa-off": {"gateway": {"autoscaling": {"enabled": False}, "pdb": {"enabled": False}}},
    "external-stores": {
        "redis": {"url": "redis://:pw@redis.example:6379/0"},
        "postgres": {"dsn": "postgresql://blink:pw@pg.example:5432/blink"},
        "config": {"cache": {"exact": {"enabled": True}, "semantic": {"enabled": True}}},
    },
    "existing-secrets": {
        "redis": {"existingSecret": STORES_SECRET},
        "postgres": {"existingSecret": STORES_SECRET},
        "secrets": {"existingSecret": "upstream-keys"},
    },
    "in-chart-stores": {
        "redis": {"enabled": True, "password": "r-pass"},
        "postgres": {"enabled": True, "password": "p/ass word"},
        "engine": {"persistence": {"enabled": False}},
    },
    "vllm": {
        "engine": {"enabled": False},
        "vllm": {
            "enabled": True,
            "replicas": 2,
            "gpus": 2,
            "quantization": "fp8",
            "speculativeConfig": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
            "hfTokenSecret": {"name": "hf", "key": "token"},
        },
        "upstreams": [{"name": "cloud", "base_url": "https://api.example.com/v1", "api_key_env": "CLOUD_KEY"}],
        "secrets": {"env": {"CLOUD_KEY": "sk-test"}},
        "serviceMonitor": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
    "engine-gpu-tuned": {
        "engine": {"replicas": 3, "gpus": 1, "quantization": "int8", "speculative": "ngram", "extraArgs": ["--log-level=debug"]},
        "config": {"server": {"max_concurrent_streams": 512}, "ratelimit": {"requests_per_minute": 60}},
    },
}


def render(values: dict[str, Any]) -> dict[str, str]:
    with helm_python.Chart.load(CHART) as chart:
        return chart.render(copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE)


def documents(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every non-empty Kubernetes object the chart renders for ``values``."""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(render(values).items()):
        if path.endswith(".txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def one(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    if len(found) != 1:
        raise LookupError(f"expected one {kind} for {component}, found {[d['metadata']['name'] for d in found]}")
    return found[0]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    if len(found) != 1:
        raise LookupError(f"expected one {kind} named {name}, found {len(found)}")
    return found[0]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def gateway_yaml(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The gateway's blink.yaml from its ConfigMap."""
    data = yaml.safe_load(one(docs, "ConfigMap", "gateway")["data"]["blink.yaml"])
    assert isinstance(data, dict)
    return data
