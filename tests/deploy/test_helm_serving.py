"""What the chart deploys actually serves: the rendered engine command and the rendered gateway
ConfigMap, run as real `blink` processes on 127.0.0.1 (tiny model), answer the real openai client.

Only what Kubernetes itself provides is swapped: the headless Service's DNS name becomes
127.0.0.1, the model is the tiny test checkpoint, and ports are free loopback ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
import pytest
import yaml
from helm_render import documents, gateway_yaml, one

BLINK = [sys.executable, "-m", "blink.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout_s} s")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_rendered_engine_and_gateway_serve_a_chat(
    tiny_llama: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    docs = documents({})
    engine = one(docs, "StatefulSet", "engine")["spec"]["template"]["spec"]["containers"][0]
    assert engine["command"] == ["blink"]
    engine_port = free_port()
    local = {"--model": str(tiny_llama), "--host": "127.0.0.1", "--port": str(engine_port),
             "--kv-cache-memory": "64MiB", "--threads": "1"}
    args = [a if a.split("=", 1)[0] not in local else f"{a.split('=', 1)[0]}={local[a.split('=', 1)[0]]}" for a in engine["args"]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "BLINK_OBS__REQUEST_LOG": "off"}
    engine_log, gateway_log = tmp_path / "engine.log", tmp_path / "gateway.log"
    with engine_log.open("wb") as out:
        processes.append(subprocess.Popen([*BLINK, *args], env=env, stdout=out, stderr=subprocess.STDOUT))

    config = gateway_yaml(docs)
    (pool,) = config["models"]
    url = urlsplit(pool["base_url"])
    pool["base_url"] = url._replace(netloc=f"127.0.0.1:{engine_port}").geturl()  # the headless Service, resolved
    path = tmp_path / "blink.yaml"
    path.write_text(yaml.safe_dump(config))
    gateway = one(docs, "Deployment", "gateway")["spec"]["template"]["spec"]["containers"][0]
    gw_port = free_port()
    gw_args = [a for a in gateway["args"] if a not in ("0.0.0.0", str(config["server"]["port"]), "/etc/blink/blink.yaml")]
    assert gw_args == ["serve", "--config", "--host", "--port"]
    cmd = [*BLINK, "serve", "--config", str(path), "--host", "127.0.0.1", "--port", str(gw_port)]
    with gateway_log.open("wb") as out:
        processes.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))

    # The chart's probes: the engine is ready once its model is loaded, the gateway once it has a
    # healthy replica of every model.
    wait_ready(f"http://127.0.0.1:{engine_port}{engine['readinessProbe']['httpGet']['path']}", processes[0], engine_log, 120)
    wait_ready(f"http://127.0.0.1:{gw_port}{gateway['readinessProbe']['httpGet']['path']}", processes[1], gateway_log, 60)
    assert httpx.get(f"http://127.0.0.1:{gw_port}{gateway['livenessProbe']['httpGet']['path']}").status_code == 200

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{gw_port}/v1", api_key="-")
    stream = client.chat.completions.create(
        model=config["default_model"], messages=[{"role": "user", "content": "hello"}], max_tokens=8,
        temperature=0, stream=True, stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text and finish in (["length"], ["stop"])
    assert chunks[-1].usage is not None and 1 <= chunks[-1].usage.completion_tokens <= 8
