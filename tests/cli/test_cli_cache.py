"""``blink keys`` and ``blink cache`` through the real CLI entry point (typer's runner)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from blink.cli.main import app


@pytest.fixture
def env(tmp_path: Path, onnx_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BLINK_CACHE__PATH", str(tmp_path / "cache.db"))
    monkeypatch.setenv("BLINK_CACHE__SEMANTIC__ONNX_DIR", str(onnx_dir))
    monkeypatch.setenv("BLINK_AUTH__KEYS_DB", str(tmp_path / "keys.db"))
    return tmp_path


def test_keys_create_list_revoke(env: Path) -> None:
    runner = CliRunner()
    created = runner.invoke(app, ["keys", "create", "--tenant", "acme", "--model", "fake", "--rpm", "5"])
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[0]
    assert secret.startswith("bk-")
    listed = runner.invoke(app, ["keys", "list"])
    key_id = secret.split("-")[1]
    assert key_id in listed.stdout and "acme" in listed.stdout and secret not in listed.stdout
    assert runner.invoke(app, ["keys", "revoke", key_id]).exit_code == 0
    assert "revoked" in runner.invoke(app, ["keys", "list"]).stdout
    assert runner.invoke(app, ["keys", "revoke", key_id]).exit_code == 1


def test_cache_warm_stats_clear(env: Path) -> None:
    queries = env / "queries.jsonl"
    lines = [
        {"model": "fake", "messages": [{"role": "user", "content": "What are your opening hours?"}], "response": "9 to 5."},
        {"model": "fake", "messages": [{"role": "user", "content": "Do you deliver on Sundays?"}], "response": "No."},
    ]
    queries.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    runner = CliRunner()
    warmed = runner.invoke(app, ["cache", "warm", "--from", str(queries), "--tenant", "acme"])
    assert warmed.exit_code == 0, warmed.output
    assert "warmed 2" in warmed.stdout
    assert "entries 2" in runner.invoke(app, ["cache", "stats"]).stdout
    assert "removed 2" in runner.invoke(app, ["cache", "clear"]).stdout
    assert "entries 0" in runner.invoke(app, ["cache", "stats"]).stdout
