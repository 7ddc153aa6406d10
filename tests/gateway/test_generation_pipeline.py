"""The one generation pipeline: priority lanes, the per-key sequence quota, ``n`` in the rate
limit, the principal in the request log, and voice turns through the same admission.

HTTP cases run a real gateway with API keys (a real keys db) in front of the real fake upstream,
through the real ``openai`` client; voice turns call the real ``GatewayPath`` adapter on
a real pipeline (a whole voice session needs Whisper and an engine; the adapter is the seam).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.config.gateway import AuthSettings, ObsSettings, RateLimitSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKey, ApiKeyStore
from blink.gateway.front import GatewayFront
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.ratelimit.limiter import RateLimiter
from blink.gateway.ratelimit.sequence_quota import SequenceQuota
from blink.gateway.voice_service import GatewayPath
from blink.protocol.errors import PermissionDeniedError, RateLimitError
from blink.serve import build_app, build_registry

MSGS = [{"role": "user", "content": "hi"}]


def _settings(upstream: FakeUpstream, tmp: Path) -> Settings:
    return Settings(
        server=ServerSettings(),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30),
                OpenAIHTTPModel(name="other", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
        auth=AuthSettings(enabled=True, keys_db=str(tmp / "keys.db")),
        obs=ObsSettings(request_log=str(tmp / "requests.log")),
    )


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture(scope="module")
def keys(tmp: Path) -> ApiKeyStore:
    return ApiKeyStore(tmp / "keys.db")


@pytest.fixture(scope="module")
def secured(upstream: FakeUpstream, tmp: Path, keys: ApiKeyStore) -> Iterator[LiveServer]:
    with LiveServer(build_app(_settings(upstream, tmp))) as server:
        yield server


def _client(server: LiveServer, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0)


def _post(server: LiveServer, secret: str, **body: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json={"model": "fake", "messages": MSGS, **body},
                      headers={"authorization": f"Bearer {secret}"}, timeout=30)


# -- priority lanes ---------------------------------------------------------------------------


def test_a_priority_lane_needs_its_scope(secured: LiveServer, keys: ApiKeyStore) -> None:
    _, plain = keys.create("acme")
    _, voice = keys.create("acme", scopes=["priority:voice"])
    for lane in ("voice", "batch"):
        with pytest.raises(openai.PermissionDeniedError) as exc:
            _client(secured, plain).chat.completions.create(
                model="fake", messages=MSGS, extra_headers={"x-blink-priority": lane})  # type: ignore[arg-type]
        err = exc.value.body
        assert isinstance(err, dict)
        assert err["code"] == "priority_not_allowed" and err["param"] == "x-blink-priority"
        assert f"priority:{lane}" in err["message"]
    # The default lane needs nothing; a granted lane is honoured.
    ok = _client(secured, plain).chat.completions.create(
        model="fake", messages=MSGS, extra_headers={"x-blink-priority": "interactive"})  # type: ignore[arg-type]
    assert ok.choices[0].message.content
    granted = _client(secured, voice).chat.completions.create(
        model="fake", messages=MSGS, extra_headers={"x-blink-priority": "voice"})  # type: ignore[arg-type]
    assert granted.choices[0].message.content


def test_a_refused_model_is_logged_with_its_key(secured: LiveServer, keys: ApiKeyStore, tmp: Path) -> None:
    key, secret = keys.create("acme", models=["fake"])
    with pytest.raises(openai.PermissionDeniedError):
        _client(secured, secret).chat.completions.create(model="other", messages=MSGS)  # type: ignore[arg-type]
    deadline = time.monotonic() + 5
    while True:  # the log line is written when the response ends
        lines = [orjson.loads(x) for x in (tmp / "requests.log").read_bytes().splitlines() if x.strip()]
        refused = [x for x in lines if x["status"] == 403 and x["model"] == "other"]
        if refused or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert refused and refused[-1]["key_id"] == key.key_id


# -- the sequence quota and n in the rate limit --------------------------------------------------


def test_n_beyond_the_key_sequence_quota_is_429(secured: LiveServer, keys: ApiKeyStore) -> None:
    _, secret = keys.create("acme", max_sequences=4)
    with pytest.raises(openai.RateLimitError) as exc:
        _client(secured, secret).chat.completions.create(model="fake", messages=MSGS, n=8)  # type: ignore[arg-type]
    err = exc.value.body
    assert isinstance(err, dict) and err["code"] == "too_many_sequences" and err["param"] == "n"
    assert int(exc.value.response.headers["retry-after"]) >= 1
    ok = _client(secured, secret).chat.completions.create(model="fake", messages=MSGS, n=4)  # type: ignore[arg-type]
    assert len(ok.choices) == 4


def test_batched_prompts_count_prompts_times_n_against_the_quota(secured: LiveServer, keys: ApiKeyStore) -> None:
    """Each choice of each prompt of a batched completion is one engine sequence."""
    _, secret = keys.create("acme", max_sequences=4)
    with pytest.raises(openai.RateLimitError) as exc:
        _client(secured, secret).completions.create(model="fake", prompt=["a", "b", "c"], n=2, max_tokens=2)
    assert isinstance(exc.value.body, dict) and exc.value.body["code"] == "too_many_sequences"
    ok = _client(secured, secret).completions.create(model="fake", prompt=["a", "b"], n=2, max_tokens=2)
    assert ok.choices


def test_sequences_are_held_while_streaming_and_released_when_it_completes(
    secured: LiveServer, keys: ApiKeyStore
) -> None:
    _, secret = keys.create("acme", max_sequences=4)
    client = _client(secured, secret)
    stream = client.chat.completions.create(model="fake", messages=MSGS, n=4, stream=True,  # type: ignore[arg-type]
                                            user="delay=0.05;tokens=20")
    first = next(iter(stream))
    assert first.choices
    busy = _post(secured, secret)
    assert busy.status_code == 429 and busy.json()["error"]["code"] == "too_many_sequences"
    assert busy.headers["retry-after"] == "1"
    for _ in stream:
        pass
    assert _post(secured, secret).status_code == 200


def test_sequences_are_released_when_the_client_aborts(secured: LiveServer, keys: ApiKeyStore) -> None:
    _, secret = keys.create("acme", max_sequences=4)
    body = {"model": "fake", "messages": MSGS, "n": 4, "stream": True, "user": "delay=0.2;tokens=100"}
    with httpx.Client(timeout=30) as h, h.stream("POST", f"{secured.url}/v1/chat/completions", json=body,
                                                 headers={"authorization": f"Bearer {secret}"}) as r:
        assert r.status_code == 200
        chunks = r.iter_bytes()  # held: a dropped iterator would close the response at once
        assert b"error" not in next(chunks)
        assert _post(secured, secret).status_code == 429
    # The server notices the disconnect and aborts the upstream call; the lease goes with it.
    deadline = time.monotonic() + 10
    while (status := _post(secured, secret, n=4).status_code) != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 200


def test_sequences_are_released_when_the_backend_fails(secured: LiveServer, keys: ApiKeyStore) -> None:
    _, secret = keys.create("acme", max_sequences=4)
    for stream in (False, True):
        failed = _post(secured, secret, n=4, user="fail=500", stream=stream)
        assert failed.status_code >= 500 or b"error" in failed.content
    assert _post(secured, secret, n=4).status_code == 200


def test_n_counts_as_n_requests_in_the_rate_limit(secured: LiveServer, keys: ApiKeyStore) -> None:
    _, secret = keys.create("acme", requests_per_minute=4)
    assert _post(secured, secret, n=3).status_code == 200
    refused = _post(secured, secret, n=2)  # 3 + 2 > 4: one request, but two generations
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    assert _post(secured, secret, n=1).status_code == 200


# -- the pipeline itself, and voice turns through it ---------------------------------------------


@pytest.fixture
async def pipeline(upstream: FakeUpstream, tmp_path: Path) -> AsyncIterator[GenerationPipeline]:
    registry = build_registry(_settings(upstream, tmp_path))
    await registry.start_all()
    front = GatewayFront(limiter=RateLimiter(RateLimitSettings()))
    try:
        yield GenerationPipeline(registry, front, SequenceQuota(64))
    finally:
        await front.aclose()
        await registry.aclose_all()


def _turn(model: str = "fake", priority: str | None = "voice") -> GenerationRequest:
    return GenerationRequest(request_id="voice-t", model=model, kind="chat",
                             options=SamplingOptions(max_tokens=8), messages=MSGS, priority=priority)


def _key(**fields: object) -> ApiKey:
    return ApiKey(key_id=f"k{time.monotonic_ns()}", tenant="acme", **fields)  # type: ignore[arg-type]


async def _answer(backend: GatewayPath, req: GenerationRequest) -> str:
    return "".join([d.text async for d in backend.stream(req) if d.text])


async def test_a_voice_turn_passes_model_permission_and_the_rate_limit(pipeline: GenerationPipeline) -> None:
    restricted = GatewayPath(pipeline, _key(models=["fake"], requests_per_minute=1))
    with pytest.raises(PermissionDeniedError):
        await _answer(restricted, _turn(model="other"))
    assert await _answer(restricted, _turn())
    with pytest.raises(RateLimitError):  # the second turn in the minute
        await _answer(restricted, _turn())


async def test_a_voice_turn_runs_in_the_voice_lane_only_for_keys_granted_it(pipeline: GenerationPipeline) -> None:
    plain, granted = _turn(), _turn()
    await _answer(GatewayPath(pipeline, _key()), plain)
    await _answer(GatewayPath(pipeline, _key(scopes=["priority:voice"])), granted)
    assert plain.priority is None and granted.priority == "voice"
    anonymous = _turn()  # API keys off: every lane, as before
    await _answer(GatewayPath(pipeline, None), anonymous)
    assert anonymous.priority == "voice"


async def test_the_sequence_lease_is_given_back_on_every_end(pipeline: GenerationPipeline) -> None:
    key = _key(max_sequences=1)
    gen = await pipeline.run(key, _turn(priority=None), Directives())
    with pytest.raises(RateLimitError) as exc:
        await pipeline.run(key, _turn(priority=None), Directives())
    assert exc.value.code == "too_many_sequences"
    await gen.stream().aclose()  # closed before it ever ran: its caller's close gives the lease back
    gen.close()
    assert pipeline.quota.in_flight(key.key_id) == 0
    gen = await pipeline.run(key, _turn(priority=None), Directives())
    deltas = gen.stream()
    assert await anext(deltas)
    await deltas.aclose()  # closed mid-answer (a barge-in): the generator's own finally
    assert pipeline.quota.in_flight(key.key_id) == 0
    gen = await pipeline.run(key, _turn(priority=None), Directives())
    assert "".join([d.text async for d in gen.stream() if d.text])  # read to the end
    assert pipeline.quota.in_flight(key.key_id) == 0
    # A refusal after the quota (the rate limit) holds nothing either.
    limited = _key(max_sequences=1, requests_per_minute=1)
    gen = await pipeline.run(limited, _turn(priority=None), Directives())
    async for _ in gen.stream():
        pass
    with pytest.raises(RateLimitError) as exc:
        await pipeline.run(limited, _turn(priority=None), Directives())
    assert exc.value.code == "rate_limit_exceeded"
    assert pipeline.quota.in_flight(limited.key_id) == 0
