"""``blink batch run`` against a running gateway and with a private local server; ``blink usage``."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from live_server import LiveServer
from typer.testing import CliRunner
from upstream_server import FakeUpstream

from blink.cli.main import app
from blink.config.batch import BatchSettings
from blink.config.cost import CostSettings, ModelPrice
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.serve import build_app
from tests.gateway.batch.batch_helpers import chat_line, jsonl


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    tmp = tmp_path_factory.mktemp("batch-cli")
    up = FakeUpstream(tokens=4)
    with LiveServer(up) as upstream:
        up.base_url = f"{upstream.url}/v1"
        settings = Settings(
            models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=up.base_url, read_timeout_s=30)],
            batch=BatchSettings(path=str(tmp / "batch.db")),
            cost=CostSettings(prices={"fake": ModelPrice(input=1.0, output=2.0)}, path=str(tmp / "usage.db")),
        )
        with LiveServer(build_app(settings)) as server:
            yield server, tmp


def test_batch_run_writes_results_and_errors(gateway: tuple[LiveServer, Path], tmp_path: Path) -> None:
    server, _ = gateway
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl([chat_line(f"r{i}", f"hello {i}", model="fake") for i in range(5)] + [b"{broken"]))
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["batch", "run", str(src), "-o", str(out), "--base-url", f"{server.url}/v1",
                                      "--poll-s", "0.05"])
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert sorted(x["custom_id"] for x in lines) == [f"r{i}" for i in range(5)]
    assert all(x["response"]["status_code"] == 200 for x in lines)
    (error,) = [orjson.loads(x) for x in (tmp_path / "out.errors.jsonl").read_bytes().splitlines()]
    assert error["error"]["code"] == "invalid_json"


def test_batch_run_reports_server_errors(gateway: tuple[LiveServer, Path], tmp_path: Path) -> None:
    server, _ = gateway
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl([chat_line("a", "b", model="fake")]))
    result = CliRunner().invoke(app, ["batch", "run", str(src), "-o", str(tmp_path / "o.jsonl"), "--base-url",
                                      f"{server.url}/v1", "--endpoint", "/v1/embeddings"])
    assert result.exit_code == 2 and "endpoint" in result.output


def test_usage_report_by_key_and_model(gateway: tuple[LiveServer, Path]) -> None:
    server, tmp = gateway
    r = httpx.post(f"{server.url}/v1/chat/completions",
                   json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert r.status_code == 200
    time.sleep(1.5)  # the ledger writes behind, once a second
    result = CliRunner().invoke(app, ["usage", "--db", str(tmp / "usage.db"), "--all"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "anonymous" in result.output and "fake" in result.output and "total cost $" in result.output
    assert "saved (cache hits, prompt compression) $" in result.output


def test_batch_run_with_a_local_model(tiny_llama: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl([chat_line(f"l{i}", f"local {i}", max_tokens=4, model="") for i in range(3)]))
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([sys.executable, "-m", "blink.cli", "batch", "run", str(src), "-o", str(out), "--model",
                           str(tiny_llama), "--poll-s", "0.1"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert sorted(orjson.loads(x)["custom_id"] for x in out.read_bytes().splitlines()) == ["l0", "l1", "l2"]
    # The private server is stopped in order: a clean run reports no engine death on the way out.
    assert "died" not in proc.stderr, proc.stderr
