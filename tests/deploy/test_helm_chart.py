"""The Helm chart lints strictly, renders valid Kubernetes objects for every value combination,
and the plain manifests committed under deploy/manifests/ are what it renders today."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import helm_python
import kubernetes_validate
import pytest
from helm_render import CHART, CRD_KINDS, KUBE_VERSION, REPO, VARIANTS, documents, render

# helm lint severities: 1 info, 2 warning, 3 error (strict turns warnings into failures).
_WARNING = 2


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_is_clean(variant: str) -> None:
    report = helm_python.lint(CHART, VARIANTS[variant], strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= _WARNING]
    assert report["errors"] == [] and problems == [], (report["errors"], problems)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_validates_strictly(variant: str) -> None:
    docs = documents(VARIANTS[variant])
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ConfigMap", "ServiceAccount"} <= kinds
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_service_monitor_scrapes_every_blink_service() -> None:
    docs = documents(VARIANTS["vllm"])
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    wanted = {e["key"]: set(e["values"]) for e in monitor["spec"]["selector"]["matchExpressions"]}
    scraped = [
        s for s in docs
        if s["kind"] == "Service" and all(s["metadata"]["labels"].get(k) in v for k, v in wanted.items())
    ]
    components = {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in scraped}
    assert components == {"gateway", "vllm"}
    assert all(any(p["name"] == "http" for p in s["spec"]["ports"]) for s in scraped)


def test_in_chart_postgres_needs_a_password() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="postgres.password is required"):
        render({"postgres": {"enabled": True}})


def test_names_stay_within_kubernetes_limits() -> None:
    docs = documents({"fullnameOverride": "x" * 80, **VARIANTS["in-chart-stores"]})
    for doc in docs:
        name = doc["metadata"]["name"]
        # StatefulSet pods append "-<ordinal>" and a controller hash label: keep room for both.
        limit = 52 if doc["kind"] == "StatefulSet" else 63
        assert len(name) <= limit, (doc["kind"], name)


def test_rendered_manifests_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "render.py"), "--check"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_manifests_validate() -> None:
    import yaml

    manifests = sorted((REPO / "deploy" / "manifests").glob("*.yaml"))
    assert [p.stem for p in manifests] == ["default", "vllm-shared-state"]
    for path in manifests:
        docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            if doc["kind"] not in CRD_KINDS:
                kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"engine": {"replica": 3}}, "additional properties 'replica' not allowed"),
        ({"vllm": {"gpuMemoryUtilization": 2}}, "gpuMemoryUtilization"),
        ({"gateway": {"autoscaling": {"enabled": "yes"}}}, "want boolean"),
        ({"engine": {"quantization": "int4"}}, "quantization"),
    ],
)
def test_values_schema_rejects_typos_and_bad_types(values: dict[str, Any], error: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=error):
        render(values)


def test_schema_enums_match_blink_settings() -> None:
    import json
    import typing

    from blink.config.models import EmbeddedModel

    engine = json.loads((CHART / "values.schema.json").read_text())["properties"]["engine"]["properties"]
    for value, field in (("quantization", "quantization"), ("speculative", "speculative"), ("dtype", "dtype")):
        assert set(engine[value]["enum"]) == set(typing.get_args(EmbeddedModel.model_fields[field].annotation)), value
