"""``blink engine serve``: the embedded engine as a standalone model server (a real process,
a tiny model, the real openai client), with the gateway layers off whatever the environment
says, and vLLM's /metrics names; ``blink serve --engine`` accepts only embedded or vllm."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from servers import free_port

from blink.cli.engine import engine_settings


def test_gateway_layers_are_off_even_when_the_environment_turns_them_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLINK_AUTH__ENABLED", "true")
    monkeypatch.setenv("BLINK_CACHE__EXACT__ENABLED", "true")
    monkeypatch.setenv("BLINK_RATELIMIT__REQUESTS_PER_MINUTE", "5")
    s = engine_settings({"port": 9}, {"model": "/some/model", "name": "m"})
    assert not s.auth.enabled and not s.cache.exact.enabled and s.ratelimit.requests_per_minute == 0
    assert [(m.name, m.kind) for m in s.models] == [("m", "embedded")]


def test_serve_rejects_an_unknown_engine() -> None:
    from typer.testing import CliRunner

    from blink.cli.main import app

    out = CliRunner().invoke(app, ["serve", "--engine", "tgi"])
    assert out.exit_code == 2 and "--engine must be embedded or vllm" in out.output


def test_engine_serve_process_answers_and_exports_vllm_metrics(tiny_llama: Path) -> None:
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", BLINK_OBS__REQUEST_LOG="off")
    proc = subprocess.Popen(
        [sys.executable, "-m", "blink.cli", "engine", "serve", "--model", str(tiny_llama), "--port", str(port),
         "--threads", "1", "--served-model-name", "tiny", "--dtype", "float32", "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, "engine server exited"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "not ready in 90 s"
            time.sleep(0.2)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        out = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)  # type: ignore[arg-type]
        assert out.usage is not None and out.usage.completion_tokens > 0
        metrics = httpx.get(f"{url}/metrics").text
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:time_to_first_token_seconds"):
            assert f'{name}{{model_name="tiny"' in metrics or f"{name}_bucket{{" in metrics, name
    finally:
        proc.terminate()
        proc.wait(timeout=30)
