"""`blink serve` end to end on the embedded engine: real sockets, the real openai client."""

from __future__ import annotations

import asyncio
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
from live_server import LiveServer

from blink.backends.embedded import EmbeddedBackend
from blink.config.models import EmbeddedModel, OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.serve import build_registry

MODEL = "tiny"


@pytest.fixture(scope="module")
def served(tiny_qwen2: Path) -> Iterator[tuple[str, EmbeddedBackend]]:
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=256, enable_prefix_caching=True)],
    )
    registry = build_registry(settings)
    backend = registry.resolve(MODEL)
    with LiveServer(create_app(registry, settings.server)) as server:
        yield server.url, backend  # type: ignore[misc]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_models_and_readiness(served: tuple[str, EmbeddedBackend]) -> None:
    url, _ = served
    assert [m.id for m in _client(url).models.list().data] == [MODEL]
    assert httpx.get(f"{url}/ready").status_code == 200
    assert httpx.get(f"{url}/health").status_code == 200


def test_chat_stream_equals_non_stream_greedy(served: tuple[str, EmbeddedBackend]) -> None:
    url, _ = served
    client = _client(url)
    msgs = [{"role": "user", "content": "Write a function that adds two numbers."}]
    full = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0)  # type: ignore[arg-type]
    chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0,  # type: ignore[arg-type]
                                                 stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == full.choices[0].message.content
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens  # type: ignore[union-attr]
    assert full.usage.prompt_tokens > 5  # type: ignore[union-attr]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [full.choices[0].finish_reason]


def test_completions_n_and_logprobs(served: tuple[str, EmbeddedBackend]) -> None:
    url, _ = served
    res = _client(url).completions.create(model=MODEL, prompt="import os\n", max_tokens=6, n=2, seed=3,
                                          temperature=0.9, logprobs=2)
    assert sorted(c.index for c in res.choices) == [0, 1]
    for c in res.choices:
        assert c.logprobs is not None and len(c.logprobs.tokens or []) == 6
    assert res.usage is not None and res.usage.completion_tokens == 12


async def test_async_client_concurrent_streams(served: tuple[str, EmbeddedBackend]) -> None:
    url, _ = served
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)

    async def one(i: int) -> str:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"question {i}"}], max_tokens=8, temperature=0,
            stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    solo = [await one(i) for i in range(4)]
    assert list(await asyncio.gather(*[one(i) for i in range(4)])) == solo
    await client.close()


def test_request_errors_are_openai_errors(served: tuple[str, EmbeddedBackend]) -> None:
    url, _ = served
    client = _client(url)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x " * 400}], max_tokens=4)
    assert exc.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as exc2:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=1000)
    assert exc2.value.body["param"] == "max_tokens"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])


def test_client_disconnect_frees_engine_blocks(served: tuple[str, EmbeddedBackend]) -> None:
    url, backend = served
    body = {"model": MODEL, "stream": True, "max_tokens": 200, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": "a long answer please"}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as r:
        got = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                got += 1
            if got == 3:
                break  # leave mid-stream: closing the response drops the connection
    # The engine must abort: a follow-up request's step statistics show nothing left running.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        _client(url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=1)
        if backend.load().running == 0:
            break
    load = backend.load()
    assert load.running == 0 and load.waiting == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_blink_serve_command_with_local_model(tiny_llama: Path) -> None:
    """`blink serve` end to end; then SIGTERM to its whole process group (systemd's default
    KillMode, ``kill -- -PGID``) while a stream is open: the stream still ends whole, as the
    gateway drains it, and the engine core is not killed under it."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--model", str(tiny_llama), "--port",
                             str(port), "--threads", "1", "--dtype", "float32", "--served-model-name", "local"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            time.sleep(0.3)
        stream = _client(f"http://127.0.0.1:{port}").chat.completions.create(
            model="local", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True)
        chunks = list(stream)
        assert chunks[-1].choices[0].finish_reason in ("length", "stop")
        draining = _client(f"http://127.0.0.1:{port}").chat.completions.create(
            model="local", messages=[{"role": "user", "content": "hi"}], max_tokens=48, stream=True,
            extra_body={"ignore_eos": True})
        first = next(iter(draining))
        os.killpg(proc.pid, signal.SIGTERM)
        rest = [c for c in draining if c.choices]
        assert first.choices and rest[-1].choices[0].finish_reason == "length"
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        output = proc.stdout.read().decode() if proc.stdout else ""
        assert "engine core died" not in output and "Traceback" not in output, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_several_named_models_side_by_side(tiny_llama: Path) -> None:
    """One server, an embedded model and an upstream model; `model` picks the backend."""
    from upstream_server import FakeUpstream

    up = FakeUpstream(tokens=3)
    with LiveServer(up) as upstream:
        settings = Settings(models=[
            EmbeddedModel(name="local", kind="embedded", model=str(tiny_llama), dtype="float32", threads=1,
                          max_model_len=128),
            OpenAIHTTPModel(name="remote", kind="openai_http", base_url=f"{upstream.url}/v1", upstream_model="fake"),
        ], default_model="local")
        with LiveServer(create_app(build_registry(settings), settings.server)) as server:
            client = _client(server.url)
            assert sorted(m.id for m in client.models.list().data) == ["local", "remote"]
            remote = client.chat.completions.with_raw_response.create(
                model="remote", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
            local = client.chat.completions.with_raw_response.create(
                model="local", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0)
            assert remote.headers["x-blink-backend"] == "remote"
            assert local.headers["x-blink-backend"] == "local"
            assert remote.parse().choices[0].message.content == " t0 t1 t2"
            assert local.parse().usage.completion_tokens == 3  # type: ignore[union-attr]
            assert up.requests[-1]["model"] == "fake"


def test_blink_serve_command_with_a_gguf_file(tiny_llama: Path, tmp_path: Path) -> None:
    """`blink serve --model FOLDER` where the folder holds one .gguf: the same greedy answer as the
    checkpoint it was exported from (F32: identical weights)."""
    from tests.gguf_export import export_gguf

    folder = tmp_path / "gguf"
    folder.mkdir()
    export_gguf(tiny_llama, folder / "tiny.F32.gguf", "F32")
    messages = [{"role": "user", "content": "hello there"}]
    answers = []
    for model in (folder, tiny_llama):
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--model", str(model), "--port",
                                 str(port), "--threads", "1", "--dtype", "float32", "--served-model-name", "local"],
                                env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, "blink serve did not start"
                time.sleep(0.3)
            reply = _client(f"http://127.0.0.1:{port}").chat.completions.create(
                model="local", messages=messages, max_tokens=12, temperature=0.0)  # type: ignore[arg-type]
            answers.append(reply.choices[0].message.content)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert answers[0] and answers[0] == answers[1]
