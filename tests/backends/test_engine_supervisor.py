"""Engine supervision over real HTTP: ``kill -9`` of the engine core, restarts, /ready, /health.

A real gateway (uvicorn on 127.0.0.1) in front of a real engine-core process on the tiny model;
the core is killed with SIGKILL, as the OOM killer or an operator would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from live_server import LiveServer

from blink.backends.embedded import EmbeddedBackend
from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.config.supervision import SupervisionSettings
from blink.gateway.app import create_app
from blink.serve import build_registry

MODEL = "tiny"
# A wait, not a timing goal: a restart imports torch and loads the model in a new process,
# which takes 5-20 s on a loaded 2-core machine.
_BACK_WITHIN_S = 60.0


def _settings(model: Path, supervision: SupervisionSettings) -> Settings:
    return Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(model), dtype="float32", threads=1,
                              max_model_len=256, enable_prefix_caching=False, supervision=supervision)],
    )


@pytest.fixture(scope="module")
def served(tiny_qwen2: Path) -> Iterator[tuple[str, EmbeddedBackend]]:
    settings = _settings(tiny_qwen2, SupervisionSettings(restart_wait_s=_BACK_WITHIN_S, restart_backoff_s=0.1))
    registry = build_registry(settings)
    backend = registry.resolve(MODEL)
    with LiveServer(create_app(registry, settings.server)) as server:
        yield server.url, backend  # type: ignore[misc]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=2 * _BACK_WITHIN_S)


def _long_stream(url: str) -> httpx.Response:
    body = {"model": MODEL, "stream": True, "max_tokens": 200, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": "a long answer please"}]}
    return httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30)  # type: ignore[return-value]


def _signal_mid_stream(url: str, pid: int, sig: signal.Signals) -> list[dict[str, str]]:
    """Start a long stream, send ``sig`` to the engine core after its first chunk, and return the
    SSE error events the rest of the stream carried."""
    with _long_stream(url) as r:
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: {"):
                break
        os.kill(pid, sig)
        rest = [line for line in lines if line.startswith("data: ")]
    return [json.loads(line[6:])["error"] for line in rest if line.startswith('data: {"error"')]


def _gauge(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f'{name}{{model_name="{MODEL}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


def test_killed_engine_restarts_and_waiting_requests_succeed(served: tuple[str, EmbeddedBackend]) -> None:
    url, backend = served
    old_pid = backend.engine.pid
    assert old_pid is not None
    errors = _signal_mid_stream(url, old_pid, signal.SIGKILL)
    # The stream in flight ends with an SSE error event, the code callers retry on, no traceback.
    assert len(errors) == 1
    assert errors[0]["code"] == "engine_unavailable"
    assert "Traceback" not in errors[0]["message"]
    # Mid-restart: not ready, still live, and the dead core's gauges are gone.
    ready = httpx.get(f"{url}/ready")
    assert ready.status_code == 503
    assert ready.json()["backends"][MODEL]["ok"] is False
    assert httpx.get(f"{url}/health").status_code == 200
    assert _gauge(url, "vllm:num_requests_running") == 0
    # A request sent now waits for the new core instead of failing.
    res = _client(url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=3, temperature=0, extra_body={"ignore_eos": True})
    assert res.usage is not None and res.usage.completion_tokens == 3
    assert httpx.get(f"{url}/ready").status_code == 200
    assert httpx.get(f"{url}/health").status_code == 200
    assert backend.engine.pid not in (None, old_pid)
    assert backend.supervisor.restarts >= 1


def test_gauges_return_to_zero_after_a_client_aborts(served: tuple[str, EmbeddedBackend]) -> None:
    url, _ = served
    with _long_stream(url) as r:
        lines = r.iter_lines()
        got = 0
        while got < 3:
            got += next(lines).startswith("data: {")
        assert _gauge(url, "vllm:num_requests_running") == 1
        assert _gauge(url, "vllm:kv_cache_usage_perc") > 0
    # Leaving the block mid-stream drops the connection: the gateway aborts the request.
    # No follow-up request: the engine itself must report that nothing runs any more.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _gauge(url, "vllm:num_requests_running") != 0:
        time.sleep(0.05)
    assert _gauge(url, "vllm:num_requests_running") == 0
    assert _gauge(url, "vllm:num_requests_waiting") == 0
    assert _gauge(url, "vllm:kv_cache_usage_perc") == 0


def test_restarts_that_keep_failing_fail_health_and_requests_fast_until_one_succeeds(tiny_qwen2: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_qwen2, model)
    settings = _settings(model, SupervisionSettings(restart_wait_s=_BACK_WITHIN_S, restart_backoff_s=0.05,
                                                    restart_backoff_max_s=0.2, max_restart_failures=2))
    registry = build_registry(settings)
    backend: EmbeddedBackend = registry.resolve(MODEL)  # type: ignore[assignment]
    with LiveServer(create_app(registry, settings.server)) as server:
        shutil.rmtree(model)  # every restart now fails: the model is gone
        assert backend.engine.pid is not None
        os.kill(backend.engine.pid, signal.SIGKILL)
        deadline = time.monotonic() + _BACK_WITHIN_S
        while time.monotonic() < deadline and httpx.get(f"{server.url}/health").status_code == 200:
            time.sleep(0.05)
        health = httpx.get(f"{server.url}/health")
        assert health.status_code == 503
        assert health.json()["backends"] == [MODEL]
        assert httpx.get(f"{server.url}/ready").status_code == 503
        # Given up: requests are refused at once (not after restart_wait_s), with a retry hint.
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as exc:
            _client(server.url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                        max_tokens=2)
        assert time.monotonic() - started < _BACK_WITHIN_S
        assert exc.value.status_code == 503
        assert exc.value.body["code"] == "engine_unavailable"  # type: ignore[index]
        assert int(exc.value.response.headers["retry-after"]) >= 1
        stream = httpx.post(f"{server.url}/v1/completions", timeout=_BACK_WITHIN_S,
                            json={"model": MODEL, "prompt": "x", "max_tokens": 2, "stream": True})
        assert stream.status_code == 503
        assert stream.json()["error"]["code"] == "engine_unavailable"
        assert backend.supervisor.failures >= 2
        # Restarts go on at the capped backoff: once the model is back, so is the service.
        shutil.copytree(tiny_qwen2, model)
        deadline = time.monotonic() + _BACK_WITHIN_S
        while time.monotonic() < deadline and httpx.get(f"{server.url}/ready").status_code != 200:
            time.sleep(0.1)
        assert httpx.get(f"{server.url}/health").status_code == 200
        res = _client(server.url).completions.create(model=MODEL, prompt="x", max_tokens=2,
                                                   extra_body={"ignore_eos": True})
        assert res.usage is not None and res.usage.completion_tokens == 2


def test_a_hung_engine_is_killed_restarted_and_serves_again(tiny_qwen2: Path) -> None:
    """A core that stops stepping (SIGSTOP: alive, silent, work in hand) is a dead one after
    step_timeout_s: the stream in flight ends with engine_unavailable and a later request is served
    by a new core, with no operator."""
    settings = _settings(tiny_qwen2, SupervisionSettings(restart_wait_s=_BACK_WITHIN_S, restart_backoff_s=0.1))
    settings.models[0].step_timeout_s = 1.0  # type: ignore[union-attr]
    registry = build_registry(settings)
    backend = registry.resolve(MODEL)
    assert isinstance(backend, EmbeddedBackend)
    with LiveServer(create_app(registry, settings.server)) as server:
        old_pid = backend.engine.pid
        assert old_pid is not None
        errors = _signal_mid_stream(server.url, old_pid, signal.SIGSTOP)
        assert [e["code"] for e in errors] == ["engine_unavailable"]
        res = _client(server.url).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0,
            extra_body={"ignore_eos": True})
        assert res.usage is not None and res.usage.completion_tokens == 3
        assert backend.engine.pid not in (None, old_pid)
        assert not Path(f"/proc/{old_pid}").exists() or Path(f"/proc/{old_pid}/stat").read_text().split()[2] == "Z"
