"""What the chart renders fits the Blink it deploys: containers run real `blink` subcommands with
real flags, probes hit endpoints the app serves, the ConfigMap loads into ``Settings`` with the
Secret's env vars, the HPA's metric is one the gateway exports, and every reference resolves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import yaml
from helm_render import NAMESPACE, RELEASE, VARIANTS, documents, gateway_yaml, named, one, workloads

from blink.cli.main import app as blink_cli
from blink.config.settings import Settings, load_settings

Doc = dict[str, Any]


def parse_blink(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse ``blink ARGS`` as the real CLI would (unknown flags and bad values raise usage errors)."""
    command: Any = typer.main.get_command(blink_cli)
    path: list[str] = []
    ctx: Any = None
    while hasattr(command, "list_commands"):  # a command group (typer vendors its own click)
        ctx = command.make_context("blink", argv, parent=ctx, resilient_parsing=True)
        sub = command.get_command(ctx, argv[0])
        assert sub is not None, f"'{' '.join([*path, argv[0]])}' is not a blink subcommand"
        path.append(argv[0])
        command, argv = sub, argv[1:]
    sub_ctx = command.make_context(" ".join(path), list(argv), parent=ctx)
    return " ".join(path), dict(sub_ctx.params)


def container(workload: Doc) -> Doc:
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return c


def secret_env(docs: list[Doc], c: Doc) -> dict[str, str]:
    """The container's env as Kubernetes would set it; values from Secrets outside the chart get placeholders."""
    env: dict[str, str] = {}
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        ref = var["valueFrom"]["secretKeyRef"]
        owned = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == ref["name"]]
        env[var["name"]] = owned[0]["stringData"][ref["key"]] if owned else f"postgresql://external/{ref['key']}"
    return env


def gateway_settings(docs: list[Doc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings exactly as the gateway container builds them: its args, its env, its ConfigMap."""
    gw = container(one(docs, "Deployment", "gateway"))
    command, params = parse_blink(gw["command"][1:] + gw["args"])
    assert command == "serve"
    mount = next(m for m in gw["volumeMounts"] if m["name"] == "config")
    assert Path(params["config"]).parent == Path(mount["mountPath"])
    config = tmp_path / Path(params["config"]).name
    config.write_text(one(docs, "ConfigMap", "gateway")["data"][config.name])
    for name, value in secret_env(docs, gw).items():
        if name.startswith("BLINK_"):
            monkeypatch.setenv(name, value)
    return load_settings(config, server={"host": params["host"], "port": params["port"]})


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gateway_config_loads_into_settings(variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = VARIANTS[variant]
    docs = documents(values)
    settings = gateway_settings(docs, tmp_path, monkeypatch)
    assert settings.server.host == "0.0.0.0"
    service = one(docs, "Service", "gateway")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert container(one(docs, "Deployment", "gateway"))["ports"][0]["containerPort"] == settings.server.port
    assert settings.default_model in {m.name for m in settings.models}
    if values.get("redis"):
        assert settings.ratelimit.storage_uri.startswith(("redis://", "postgresql://external"))
    else:
        assert settings.ratelimit.storage_uri == "memory://"
    if values.get("redis"):
        assert settings.cache.store == "redis" and settings.cache.redis_url == settings.ratelimit.storage_uri
    elif values.get("postgres"):
        assert settings.cache.store == "postgres"
    else:
        assert settings.cache.store == "sqlite" and settings.cache.redis_url is None
    if values.get("postgres"):
        assert settings.cache.postgres_dsn and settings.auth.postgres_dsn == settings.cache.postgres_dsn
    else:
        assert settings.cache.postgres_dsn is None and settings.auth.postgres_dsn is None
    for key, section in values.get("config", {}).items():
        for field, value in section.items():
            actual = getattr(getattr(settings, key), field)
            assert (actual.model_dump() if hasattr(actual, "model_dump") else actual) == value or isinstance(value, dict)


def test_in_chart_stores_get_working_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = documents(VARIANTS["in-chart-stores"])
    settings = gateway_settings(docs, tmp_path, monkeypatch)
    redis_svc, pg_svc = one(docs, "Service", "redis"), one(docs, "Service", "postgres")
    assert settings.ratelimit.storage_uri == f"redis://:r-pass@{redis_svc['metadata']['name']}.{NAMESPACE}.svc:6379/0"
    # The password is URL-quoted in the DSN; the database and user match the server's env.
    assert settings.cache.postgres_dsn == f"postgresql://blink:p%2Fass+word@{pg_svc['metadata']['name']}.{NAMESPACE}.svc:5432/blink"
    pg_env = secret_env(docs, container(one(docs, "StatefulSet", "postgres")))
    assert (pg_env["POSTGRES_USER"], pg_env["POSTGRES_DB"], pg_env["POSTGRES_PASSWORD"]) == ("blink", "blink", "p/ass word")
    redis_args = container(one(docs, "StatefulSet", "redis"))["args"][0]
    assert "--requirepass" in redis_args and secret_env(docs, container(one(docs, "StatefulSet", "redis")))["REDIS_PASSWORD"] == "r-pass"


@pytest.mark.parametrize("variant", ["defaults", "engine-gpu-tuned"])
def test_engine_replicas_are_real_blink_servers_the_gateway_routes_to(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = VARIANTS[variant]
    docs = documents(values)
    sts = one(docs, "StatefulSet", "engine")
    engine = container(sts)
    command, params = parse_blink(engine["command"][1:] + engine["args"])
    assert command == "serve"
    assert params["host"] == "0.0.0.0" and params["port"] == engine["ports"][0]["containerPort"]
    gpus = values.get("engine", {}).get("gpus", 0)
    assert params["device"] == ("cuda" if gpus else "cpu")
    assert engine["resources"]["limits"].get("nvidia.com/gpu", 0) == gpus
    # The flags the CLI accepted also build a valid engine config.
    load_settings(model={"name": params["served_model_name"], "model": params["model"], "device": params["device"],
                         "kv_cache_memory_bytes": params["kv_cache_memory"], "quantization": params["quantization"],
                         "speculative": params["speculative"], "threads": params["threads"]})
    headless = named(docs, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    settings = gateway_settings(docs, tmp_path, monkeypatch)
    (pool,) = settings.models
    assert pool.name == settings.default_model == params["served_model_name"] == pool.upstream_model
    # One pooled model over the headless Service: every ready replica, health-checked on /ready.
    assert pool.base_url == f"http://{headless['metadata']['name']}.{NAMESPACE}.svc:{params['port']}/v1"
    assert pool.discovery.mode == "dns" and pool.discovery.health_path == engine["readinessProbe"]["httpGet"]["path"]
    assert headless["spec"]["ports"][0]["port"] == params["port"]


async def test_probes_and_hpa_metric_exist_on_the_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from blink.serve import build_app

    docs = documents({})
    app = build_app(gateway_settings(docs, tmp_path, monkeypatch))
    probes: set[str] = set()
    for workload in workloads(docs):
        c = container(workload)
        ports = {p["name"] for p in c["ports"]}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["port"] in ports, (workload["metadata"]["name"], probe, get)
            probes.add(get["path"])
    assert probes == {"/health", "/ready"}
    # A gateway waiting for model servers to load is unready, never restarted.
    gateway = container(one(docs, "Deployment", "gateway"))
    assert gateway["startupProbe"]["httpGet"]["path"] == gateway["livenessProbe"]["httpGet"]["path"] == "/health"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/ready"
    hpa = one(docs, "HorizontalPodAutoscaler", "gateway")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": one(docs, "Deployment", "gateway")["metadata"]["name"]}
    (metric,) = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        assert (await client.get("/health")).status_code == 200
        # The engine replicas cannot be reached from here: /ready exists and says so (503, not 404).
        ready = await client.get("/ready")
        assert ready.status_code == 503 and ready.json()["status"] == "not_ready"
        scrape = (await client.get("/metrics")).text
    assert f"# TYPE {metric} gauge" in scrape


def test_hpa_off_pins_the_replica_count() -> None:
    on, off = documents({}), documents(VARIANTS["hpa-off"])
    assert "replicas" not in one(on, "Deployment", "gateway")["spec"]
    assert one(off, "Deployment", "gateway")["spec"]["replicas"] == 2
    assert not [d for d in off if d["kind"] in ("HorizontalPodAutoscaler", "PodDisruptionBudget")
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"]
    cpu = documents({"gateway": {"autoscaling": {"cpuUtilization": 70}}})
    kinds = [m["type"] for m in one(cpu, "HorizontalPodAutoscaler", "gateway")["spec"]["metrics"]]
    assert kinds == ["Pods", "Resource"]


def test_vllm_gets_gpus_and_latency_flags() -> None:
    values = VARIANTS["vllm"]
    docs = documents(values)
    deploy = one(docs, "Deployment", "vllm")
    c = container(deploy)
    assert c["command"] == ["vllm", "serve"] and c["args"][0] == "Qwen/Qwen2.5-7B-Instruct"
    flags = dict(a.split("=", 1) if "=" in a else (a, "") for a in c["args"][1:])
    assert {"--enable-prefix-caching", "--enable-chunked-prefill"} <= flags.keys()
    assert flags["--tensor-parallel-size"] == "2" and flags["--quantization"] == "fp8"
    assert json.loads(flags["--speculative-config"]) == values["vllm"]["speculativeConfig"]
    assert flags["--served-model-name"] == "large" and flags["--port"] == str(c["ports"][0]["containerPort"])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"] == 2
    assert {"name": "shm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"  # vLLM: 200 once the model is loaded
    assert any(t["key"] == "nvidia.com/gpu" for t in deploy["spec"]["template"]["spec"]["tolerations"])
    cfg = gateway_yaml(docs)
    service = named(docs, "Service", f"{RELEASE}-blink-vllm")
    headless = named(docs, "Service", f"{RELEASE}-blink-vllm-headless")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["selector"] == service["spec"]["selector"]
    # The gateway resolves the headless name to every ready replica and health-checks each one.
    large = Settings.model_validate(cfg).models[[m["name"] for m in cfg["models"]].index("large")]
    assert large.base_url == f"http://{headless['metadata']['name']}.{NAMESPACE}.svc:{headless['spec']['ports'][0]['port']}/v1"
    assert large.discovery.mode == "dns" and large.discovery.health_path == c["readinessProbe"]["httpGet"]["path"]
    cloud = next(m for m in cfg["models"] if m["name"] == "cloud")
    assert cloud["kind"] == "openai_http"
    gw_env = {e["name"] for e in container(one(docs, "Deployment", "gateway"))["env"]}
    assert "CLOUD_KEY" in gw_env
    off = documents({"vllm": {"enabled": True, "enablePrefixCaching": False, "enableChunkedPrefill": False}})
    args = container(one(off, "Deployment", "vllm"))["args"]
    assert "--no-enable-prefix-caching" in args and "--no-enable-chunked-prefill" in args
    assert not any(a.startswith(("--speculative-config", "--quantization")) for a in args)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pods_are_locked_down_and_sized(variant: str) -> None:
    for workload in workloads(documents(VARIANTS[variant])):
        pod = workload["spec"]["template"]["spec"]
        c = container(workload)
        who = (variant, workload["metadata"]["name"])
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0, who
        assert pod["automountServiceAccountToken"] is False, who
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], who
        if workload["metadata"]["labels"]["app.kubernetes.io/component"] != "vllm":
            assert sc["readOnlyRootFilesystem"] is True, who
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"], who
        assert c["resources"]["limits"]["memory"], who


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_reference_resolves(variant: str) -> None:
    values = VARIANTS[variant]
    docs = documents(values)
    external = {values.get(s, {}).get("existingSecret", {}).get("name") for s in ("redis", "postgres")}
    external |= {values.get("secrets", {}).get("existingSecret"), values.get("vllm", {}).get("hfTokenSecret", {}).get("name")}
    owned = {(d["kind"], d["metadata"]["name"]) for d in docs}
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads(docs)]
    for w in workloads(docs):
        assert w["spec"]["selector"]["matchLabels"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
        pod = w["spec"]["template"]["spec"]
        for vol in pod.get("volumes", []):
            if "configMap" in vol:
                assert ("ConfigMap", vol["configMap"]["name"]) in owned
            if "persistentVolumeClaim" in vol:
                assert ("PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"]) in owned
        claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        c = container(w)
        volumes = {v["name"] for v in pod.get("volumes", [])} | claims
        assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes
        refs = [e["valueFrom"]["secretKeyRef"] for e in c.get("env", []) if "valueFrom" in e]
        refs += [s["secretRef"] for s in c.get("envFrom", [])]
        for ref in refs:
            secret = next((d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == ref["name"]), None)
            if secret is None:
                assert ref["name"] in external, (w["metadata"]["name"], ref)
            elif "key" in ref:
                assert ref["key"] in secret["stringData"], ref
        if "serviceName" in w["spec"]:
            assert ("Service", w["spec"]["serviceName"]) in owned
    for d in docs:
        selector = d["spec"].get("selector") if d["kind"] in ("Service", "PodDisruptionBudget") else None
        if selector is not None:
            match = selector.get("matchLabels", selector)
            assert any(match.items() <= labels.items() for labels in pod_labels), (d["kind"], d["metadata"]["name"])


def test_config_or_secret_changes_roll_the_gateway() -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        meta = one(documents(values), "Deployment", "gateway")["spec"]["template"]["metadata"]
        return {k: v for k, v in meta["annotations"].items() if k.startswith("checksum/")}

    base = annotations({})
    assert annotations({"config": {"ratelimit": {"requests_per_minute": 5}}})["checksum/config"] != base["checksum/config"]
    assert annotations({"secrets": {"env": {"K": "v"}}})["checksum/secret"] != base["checksum/secret"]
    assert annotations({"engine": {"maxNumSeqs": 8}}) == base


def test_chart_dashboard_is_the_grafana_dashboard() -> None:
    from helm_render import CHART, REPO

    dashboard = (REPO / "deploy" / "grafana" / "blink.json").read_text()
    assert (CHART / "dashboards" / "blink.json").read_text() == dashboard
    cm = one(documents(VARIANTS["vllm"]), "ConfigMap", "dashboard")
    assert json.loads(cm["data"]["blink.json"]) == json.loads(dashboard)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert yaml.safe_load(cm["data"]["blink.json"])["title"] == "Blink"


def test_the_command_check_rejects_what_blink_would() -> None:
    with pytest.raises(typer.BadParameter):
        parse_blink(["serve", "--port", "eighty"])
    with pytest.raises(Exception, match="No such option: --bogus"):
        parse_blink(["serve", "--bogus"])
    with pytest.raises(AssertionError, match="not a blink subcommand"):
        parse_blink(["deploy"])
