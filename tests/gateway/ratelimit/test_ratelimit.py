"""Rate limits: requests and tokens per key and per model; counts shared across two real
gateway processes through a real Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_server import LiveServer
from servers import RedisServer, free_port
from upstream_server import FakeUpstream

from blink.config.gateway import AuthSettings, ModelRateLimit, RateLimitSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.gateway.ratelimit.limiter import RateLimiter
from blink.protocol.errors import RateLimitError
from blink.serve import build_app

MSGS = [{"role": "user", "content": "hi"}]


def _settings(upstream: FakeUpstream, limits: RateLimitSettings, keys_db: Path | None = None) -> Settings:
    return Settings(
        server=ServerSettings(),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url)],
        ratelimit=limits,
        auth=AuthSettings(enabled=keys_db is not None, keys_db=str(keys_db or "unused")),
    )


def _chat(url: str, key: str = "x") -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "fake", "messages": MSGS},
                      headers={"authorization": f"Bearer {key}"}, timeout=30)


def test_requests_per_minute_429_with_headers(upstream: FakeUpstream) -> None:
    with LiveServer(build_app(_settings(upstream, RateLimitSettings(requests_per_minute=2)))) as server:
        first = _chat(server.url)
        assert first.status_code == 200
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        assert _chat(server.url).status_code == 200
        refused = _chat(server.url)
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"


def test_per_key_limits_are_separate(upstream: FakeUpstream, tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path / "k.db")
    _, a = store.create("a", requests_per_minute=1)
    _, b = store.create("b", requests_per_minute=1)
    with LiveServer(build_app(_settings(upstream, RateLimitSettings(), tmp_path / "k.db"))) as server:
        assert _chat(server.url, a).status_code == 200
        assert _chat(server.url, a).status_code == 429
        assert _chat(server.url, b).status_code == 200


def test_tokens_are_counted_after_the_response(upstream: FakeUpstream) -> None:
    limits = RateLimitSettings(tokens_per_minute=10)  # one 8-token answer + its prompt uses it up
    with LiveServer(build_app(_settings(upstream, limits))) as server:
        first = _chat(server.url)
        assert first.status_code == 200
        assert first.json()["usage"]["total_tokens"] >= 10
        deadline = time.monotonic() + 5
        while (r := _chat(server.url)).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)  # the charge is recorded in the background
        assert r.status_code == 429
        assert r.headers["x-ratelimit-remaining-tokens"] == "0"


def test_a_stream_the_client_hangs_up_on_is_charged_its_tokens(upstream: FakeUpstream) -> None:
    """Tokens were charged only when a response was delivered whole: reading all but the end of
    a stream and hanging up made every answer free of the token limit (and of spend)."""
    limits = RateLimitSettings(tokens_per_minute=10)
    body = {"model": "fake", "messages": MSGS, "stream": True, "user": "tokens=40;delay=0.01"}
    with LiveServer(build_app(_settings(upstream, limits))) as server, httpx.Client(timeout=30) as client:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with client.stream("POST", f"{server.url}/v1/chat/completions", json=body) as r:
                if r.status_code == 429:
                    break
                assert r.status_code == 200
                chunks = 0
                for line in r.iter_lines():
                    chunks += line.startswith("data: {")
                    if chunks == 15:  # 15 of 40 tokens delivered: hang up
                        break
            time.sleep(0.05)  # the charge is recorded in the background
        assert r.status_code == 429 and r.headers["x-ratelimit-remaining-tokens"] == "0"


# About 1,250 tokens by the gateway's estimate (4 characters a token): two such prompts overrun 2,000.
LONG_PROMPT = [{"role": "user", "content": "word " * 1000}]


@pytest.mark.parametrize("cut", ["after-first-chunk", "before-any-chunk"])
def test_a_cut_short_stream_is_charged_its_prompt(upstream: FakeUpstream, cut: str) -> None:
    """An abandoned stream was charged only the output delivered: a client hanging up before (or
    right after) the first token sent any prompt free of the token limit and of spend."""
    limits = RateLimitSettings(tokens_per_minute=2000)
    user = "tokens=40;delay=0.01" if cut == "after-first-chunk" else "stall=1"
    body = {"model": "fake", "messages": LONG_PROMPT, "stream": True, "user": user}
    # Only the stalled case hangs up on a timeout; the other waits for its first chunk, however loaded the machine.
    read_s = 0.5 if cut == "before-any-chunk" else 30
    with LiveServer(build_app(_settings(upstream, limits))) as server, httpx.Client() as client:
        for _ in range(2):
            try:
                with client.stream("POST", f"{server.url}/v1/chat/completions", json=body,
                                   timeout=httpx.Timeout(30, read=read_s)) as r:
                    assert r.status_code == 200
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            break  # the first chunk: hang up
            except httpx.ReadTimeout:
                assert cut == "before-any-chunk"  # no header came: hang up
        for _ in range(30):  # the charges are recorded in the background; each probe costs ~13 tokens
            if (r := _chat(server.url)).status_code != 200:
                break
            time.sleep(0.1)
        assert r.status_code == 429 and r.headers["x-ratelimit-remaining-tokens"] == "0"


def test_per_model_limit(upstream: FakeUpstream) -> None:
    limits = RateLimitSettings(models={"fake": ModelRateLimit(requests_per_minute=1)})
    with LiveServer(build_app(_settings(upstream, limits))) as server:
        assert _chat(server.url).status_code == 200
        refused = _chat(server.url)
        assert refused.status_code == 429 and "model 'fake'" in refused.json()["error"]["message"]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def _spawn_gateway(upstream: FakeUpstream, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ, BLINK_RATELIMIT__STORAGE_URI=redis_url, BLINK_RATELIMIT__REQUESTS_PER_MINUTE="5",
               BLINK_RATELIMIT__TIMEOUT_S="5")  # a loaded CI machine must not fail open here
    proc = subprocess.Popen(
        [sys.executable, "-m", "blink.cli", "serve", "--upstream", upstream.base_url, "--upstream-model", "fake",
         "--port", str(port), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gateway did not start")


def test_two_gateway_processes_share_counts_through_redis(upstream: FakeUpstream, redis_server: RedisServer) -> None:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # One at a time into ``procs``: if the second fails to start, the first is still stopped.
        pa, a = _spawn_gateway(upstream, redis_server.url)
        procs.append(pa)
        pb, b = _spawn_gateway(upstream, redis_server.url)
        procs.append(pb)
        statuses = [_chat(url).status_code for url in (a, b, a, b, a)]
        assert statuses == [200] * 5
        assert _chat(b).status_code == 429  # the 6th request of the minute, wherever it lands
        assert _chat(a).status_code == 429
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=15)


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
async def test_n_choices_count_as_n_requests(shared: bool, request: pytest.FixtureRequest) -> None:
    uri = request.getfixturevalue("redis_server").url if shared else "memory://"
    # A generous store timeout and fail closed: a slow first Redis connection must not pass silently.
    limiter = RateLimiter(RateLimitSettings(requests_per_minute=4, storage_uri=uri, timeout_s=10.0, fail_open=False))
    try:
        key = f"n-{time.time_ns()}"  # a fresh window on a shared Redis
        await limiter.admit(key, 0, 0, "m", 3)
        with pytest.raises(RateLimitError):  # 3 + 2 > 4: one request, but two generations
            await limiter.admit(key, 0, 0, "m", 2)
        await limiter.admit(key, 0, 0, "m", 1)  # the refusal took nothing
        with pytest.raises(RateLimitError):
            await limiter.admit(key, 0, 0, "m", 1)
    finally:
        await limiter.aclose()
