"""kill -9 mid-batch: a restarted ``blink serve`` on the same job store finishes the batch, every
line answered exactly once, and lines finished before the kill are neither redone nor lost."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
from batch_helpers import chat_line, jsonl, read_jsonl, wait_batch

LINES = 80


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(model: Path, db: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BLINK_BATCH__PATH": str(db),
           # Few lines at a time, so the kill lands with most of the batch still pending.
           "BLINK_BATCH__MAX_CONCURRENCY": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "blink.cli", "serve", "--model", str(model), "--port", str(port), "--threads", "1",
         "--dtype", "float32", "--served-model-name", "tiny", "--max-model-len", "256"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "blink serve did not start"
        time.sleep(0.3)


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """The server and its engine-core child, as kill -9 of a service would."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _done_lines(db: Path, batch_id: str) -> dict[int, str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT idx, result FROM batch_lines WHERE batch_id = ? AND done = 1", (batch_id,))
        return dict(rows.fetchall())


def test_kill_9_mid_batch_then_restart_completes_exactly_once(tiny_llama: Path, tmp_path: Path) -> None:
    db = tmp_path / "batch.db"
    port = _free_port()
    prompts = {f"line-{i}": f"Write about topic {i}" for i in range(LINES)}
    proc = _serve(tiny_llama, db, port)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        upload = client.files.create(
            file=("in.jsonl", jsonl([chat_line(c, p, max_tokens=24) for c, p in prompts.items()])), purpose="batch")
        batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        deadline = time.monotonic() + 90
        while True:
            counts = client.batches.retrieve(batch.id).request_counts
            if counts is not None and counts.completed >= 8:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        _kill_group(proc, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            _kill_group(proc, signal.SIGKILL)
    before = _done_lines(db, batch.id)
    assert 8 <= len(before) < LINES, len(before)

    proc = _serve(tiny_llama, db, port)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        done = wait_batch(client, batch.id, timeout_s=180)
        assert done.status == "completed"
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed) == (LINES, LINES)
        out = read_jsonl(client, done.output_file_id)
        assert sorted(o["custom_id"] for o in out) == sorted(prompts)  # each line exactly once
        after = _done_lines(db, batch.id)
        assert all(after[i] == result for i, result in before.items())  # finished lines were not redone
        # Results match the same requests sent one by one (greedy).
        for o in out[:: LINES // 8]:
            r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompts[o["custom_id"]]}],
                                               max_tokens=24, temperature=0)
            assert o["response"]["body"]["choices"][0]["message"]["content"] == r.choices[0].message.content
    finally:
        _kill_group(proc, signal.SIGTERM)
