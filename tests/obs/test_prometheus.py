"""A real Prometheus (Debian ``prometheus``) scrapes a real ``blink serve`` process; PromQL sees TTFT."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from system_tools import require
from upstream_server import FakeUpstream


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{url}: process exited with {proc.returncode}"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def blink_serve(obs_upstream: FakeUpstream) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "blink.cli", "serve", "--upstream", obs_upstream.base_url, "--served-model-name", "fake",
         "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait(f"http://127.0.0.1:{port}/ready", proc)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def prometheus(blink_serve: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    # Scrape every second so the test waits about a second, not the default minute.
    config.write_text(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: blink\n"
                      f"    static_configs:\n      - targets: ['{blink_serve}']\n")
    prometheus_bin = require("prometheus")
    port = _free_port()
    proc = subprocess.Popen(
        [prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={Path(work) / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait(f"http://127.0.0.1:{port}/-/ready", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


def _query(prom: str, promql: str) -> list[dict]:
    resp = httpx.get(f"{prom}/api/v1/query", params={"query": promql}, timeout=5)
    resp.raise_for_status()
    return resp.json()["data"]["result"]


def test_promql_returns_the_ttft_histogram_of_a_request(blink_serve: str, prometheus: str) -> None:
    client = openai.OpenAI(base_url=f"http://{blink_serve}/v1", api_key="x", max_retries=0)
    list(client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}], stream=True))
    count_q = 'sum(vllm:time_to_first_token_seconds_count{model_name="fake",route="chat"})'
    deadline = time.monotonic() + 20
    result: list[dict] = []
    while time.monotonic() < deadline:
        result = _query(prometheus, count_q)
        if result and float(result[0]["value"][1]) >= 1:
            break
        time.sleep(0.5)
    assert result and float(result[0]["value"][1]) == 1.0
    buckets = _query(prometheus, 'vllm:time_to_first_token_seconds_bucket{model_name="fake"}')
    les = {b["metric"]["le"]: float(b["value"][1]) for b in buckets}
    assert les["+Inf"] == 1.0 and les["60.0"] == 1.0
    p99 = _query(prometheus, 'histogram_quantile(0.99, sum by (le) (vllm:time_to_first_token_seconds_bucket))')
    assert p99 and 0 < float(p99[0]["value"][1]) <= 60
    up = _query(prometheus, 'up{job="blink"}')
    assert up and up[0]["value"][1] == "1"


def test_every_grafana_query_is_valid_promql(prometheus: str) -> None:
    from test_grafana import dashboard_exprs

    for expr in dashboard_exprs():
        # Grafana's variables, as Grafana would expand them for "All" models and a 1 s scrape.
        promql = expr.replace("$model", ".*").replace("$__rate_interval", "1m")
        resp = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=5)
        if expr.startswith("label_values("):
            continue  # a Grafana template function, not PromQL
        assert resp.status_code == 200 and resp.json()["status"] == "success", (expr, resp.text)
