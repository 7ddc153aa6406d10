"""Batch lines run through the generation pipeline as the key that created the batch.

End to end (a real gateway with API keys, a real keys db, the Batch API driven by the real
``openai`` client, the fake upstream as the model): model permission (403 per line), a spent
budget (429 ``budget_exceeded``) and safety blocking apply to every line. At the executor
(the seam the batch runner calls; the runner's retry policy is its own): the rate limit refuses
lines beyond it with 429 ``rate_limit_exceeded`` and a ``retry-after``, and a key revoked while
its lines were queued fails them with 401.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from batch_helpers import chat_line, jsonl, read_jsonl, wait_batch
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.batch import BatchSettings
from blink.config.cost import CostSettings, ModelPrice
from blink.config.gateway import AuthSettings, RateLimitSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKey, ApiKeyStore
from blink.gateway.batch.executor import PipelineLineExecutor
from blink.gateway.front import GatewayFront
from blink.gateway.pipeline import GenerationPipeline
from blink.gateway.ratelimit.limiter import RateLimiter
from blink.gateway.ratelimit.sequence_quota import SequenceQuota
from blink.serve import build_app, build_registry

CHAT = "/v1/chat/completions"
BLOCKED = "tell me about the forbidden fruit"


def _settings(upstream: FakeUpstream, tmp: Path, budgets: dict[str, float] | None = None) -> Settings:
    return Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30),
                OpenAIHTTPModel(name="other", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
        auth=AuthSettings(enabled=True, keys_db=str(tmp / "keys.db")),
        batch=BatchSettings(path=str(tmp / "batch.db"), max_concurrency=4),
        cost=CostSettings(prices={"fake": ModelPrice(input=1000, output=3000)},
                          path=str(tmp / "usage.db"), budgets=budgets or {}),
        safety={"enabled": True, "mode": "blocking", "blocklist": ["forbidden fruit"]},
    )


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("batch-pipeline")


@pytest.fixture(scope="module")
def keys(tmp: Path) -> dict[str, tuple[ApiKey, str]]:
    store = ApiKeyStore(tmp / "keys.db")
    return {"fake_only": store.create("acme", models=["fake"]), "broke": store.create("acme")}


@pytest.fixture(scope="module")
def server(upstream: FakeUpstream, tmp: Path, keys: dict[str, tuple[ApiKey, str]]) -> Iterator[LiveServer]:
    broke = keys["broke"][0].key_id
    with LiveServer(build_app(_settings(upstream, tmp, budgets={broke: 0.0}))) as live:
        yield live


def _run(server: LiveServer, secret: str, lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run one batch as ``secret``; each line's response by custom id (outputs and errors)."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0)
    upload = client.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint=CHAT, completion_window="24h")
    done = wait_batch(client, batch.id, timeout_s=60)
    assert done.status == "completed"
    results = read_jsonl(client, done.output_file_id) + read_jsonl(client, done.error_file_id)
    return {r["custom_id"]: r["response"] for r in results}


def test_a_line_for_a_model_the_key_may_not_use_is_403(server: LiveServer, keys: dict[str, tuple[ApiKey, str]]) -> None:
    lines = [chat_line("mine", "hi", model="fake"), chat_line("theirs", "hi", model="other")]
    out = _run(server, keys["fake_only"][1], lines)
    assert out["mine"]["status_code"] == 200
    assert out["theirs"]["status_code"] == 403
    assert out["theirs"]["body"]["error"]["code"] == "model_not_allowed"


def test_safety_blocking_applies_to_batch_lines(server: LiveServer, keys: dict[str, tuple[ApiKey, str]]) -> None:
    out = _run(server, keys["fake_only"][1], [chat_line("clean", "hello", model="fake"),
                                              chat_line("flagged", BLOCKED, model="fake")])
    assert out["clean"]["status_code"] == 200
    assert out["flagged"]["status_code"] == 400
    assert out["flagged"]["body"]["error"]["code"] == "content_filter"


def test_a_spent_budget_fails_every_line_with_budget_exceeded(
    server: LiveServer, keys: dict[str, tuple[ApiKey, str]]
) -> None:
    out = _run(server, keys["broke"][1], [chat_line(f"l{i}", "hi", model="fake") for i in range(3)])
    assert {r["status_code"] for r in out.values()} == {429}
    assert {r["body"]["error"]["code"] for r in out.values()} == {"budget_exceeded"}


# -- at the executor ---------------------------------------------------------------------------


@pytest.fixture
async def executor(upstream: FakeUpstream, tmp_path: Path) -> AsyncIterator[tuple[PipelineLineExecutor, ApiKeyStore]]:
    settings = _settings(upstream, tmp_path)
    registry = build_registry(settings)
    await registry.start_all()
    store = ApiKeyStore(tmp_path / "keys.db")
    front = GatewayFront(limiter=RateLimiter(RateLimitSettings()))
    execute = PipelineLineExecutor(GenerationPipeline(registry, front, SequenceQuota(64)), 4096, 30.0, store)
    try:
        yield execute, store
    finally:
        await front.aclose()
        await registry.aclose_all()
        store.close()


def _body(content: str = "hi") -> dict[str, Any]:
    return chat_line("x", content, model="fake")["body"]


async def test_lines_beyond_the_key_rate_limit_get_429_with_retry_after(
    executor: tuple[PipelineLineExecutor, ApiKeyStore],
) -> None:
    execute, store = executor
    key, _ = store.create("acme", requests_per_minute=2)
    results = [await execute(_body(), CHAT, key.key_id) for _ in range(5)]
    assert [r.status for r in results] == [200, 200, 429, 429, 429]
    for refused in results[2:]:
        assert refused.body["error"]["code"] == "rate_limit_exceeded"
        assert int(refused.headers["retry-after"]) >= 1
    assert results[0].headers == {}


async def test_a_revoked_key_fails_its_queued_lines_with_401(
    executor: tuple[PipelineLineExecutor, ApiKeyStore],
) -> None:
    execute, store = executor
    key, _ = store.create("acme")
    assert (await execute(_body(), CHAT, key.key_id)).status == 200
    store.revoke(key.key_id)
    revoked = await execute(_body(), CHAT, key.key_id)
    assert revoked.status == 401 and revoked.body["error"]["code"] == "invalid_api_key"


async def test_n_beyond_the_key_sequence_quota_fails_the_line(
    executor: tuple[PipelineLineExecutor, ApiKeyStore],
) -> None:
    execute, store = executor
    key, _ = store.create("acme", max_sequences=2)
    refused = await execute({**_body(), "n": 3}, CHAT, key.key_id)
    assert refused.status == 429 and refused.body["error"]["code"] == "too_many_sequences"
    assert refused.headers["retry-after"] == "1"
    ok = await execute({**_body(), "n": 2}, CHAT, key.key_id)
    assert ok.status == 200 and len(ok.body["choices"]) == 2
