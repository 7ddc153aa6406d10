"""Semantic cache through a real gateway: guarded hits, traps refused, namespaces, tenants."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from cache_helpers import cache_entries, wait_entries
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.gateway import AuthSettings, CacheSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.serve import build_app

SYSTEM = {"role": "system", "content": "You are a helpful support agent."}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    path = tmp_path_factory.mktemp("sem-keys") / "keys.db"
    store = ApiKeyStore(path)
    return path, store.create("tenant-a")[1], store.create("tenant-b")[1]


@pytest.fixture(scope="module")
def semantic(upstream: FakeUpstream, onnx_dir: Path, keys: tuple[Path, str, str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Any]]:
    cache = CacheSettings.model_validate({
        "exact": {"enabled": True},
        "semantic": {"enabled": True, "onnx_dir": str(onnx_dir)},
        "path": str(tmp_path_factory.mktemp("sem-cache") / "cache.db"),
    })
    settings = Settings(
        server=ServerSettings(),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url)],
        auth=AuthSettings(enabled=True, keys_db=str(keys[0])),
        cache=cache,
    )
    app = build_app(settings)
    with LiveServer(app) as server:
        yield server, app


def _ask(server: LiveServer, key: str, question: str, **extra: Any) -> httpx.Response:
    messages = extra.pop("messages", None) or [SYSTEM, {"role": "user", "content": question}]
    body = {"model": "fake", "messages": messages, "temperature": 0, **extra}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                      timeout=30)


def _fill(semantic: tuple[LiveServer, Any], key: str, question: str, **extra: Any) -> None:
    server, app = semantic
    before = cache_entries(app)
    assert _ask(server, key, question, **extra).headers["x-blink-cache"] == "miss"
    wait_entries(app, before + 1)


def test_paraphrase_is_a_semantic_hit(semantic: tuple[LiveServer, Any], keys: tuple[Path, str, str]) -> None:
    server, _ = semantic
    _fill(semantic, keys[1], "How do I cancel my travel insurance policy?")
    resp = _ask(server, keys[1], "How can I cancel my travel insurance policy?")
    assert resp.headers["x-blink-cache"] == "semantic"
    assert 0.72 <= float(resp.headers["x-blink-cache-similarity"]) <= 1.0
    assert resp.json()["choices"][0]["message"]["content"].startswith(" t0")


def test_trap_is_not_served(semantic: tuple[LiveServer, Any], keys: tuple[Path, str, str]) -> None:
    server, _ = semantic
    _fill(semantic, keys[1], "Is the clinic open on Sundays?")
    assert _ask(server, keys[1], "Is the clinic closed on Sundays?").headers["x-blink-cache"] == "miss"
    assert _ask(server, keys[1], "Is the clinic open on Saturdays?").headers["x-blink-cache"] == "miss"


def test_tenants_never_share_entries(semantic: tuple[LiveServer, Any], keys: tuple[Path, str, str]) -> None:
    server, _ = semantic
    _, a, b = keys
    _fill(semantic, a, "What is the refund policy for damaged parcels?")
    _fill(semantic, a, "How long does delivery to Scotland take?")
    # Tenant B asks the very same thing, then a paraphrase of the other: neither is served from A.
    assert _ask(server, b, "What is the refund policy for damaged parcels?").headers["x-blink-cache"] == "miss"
    assert _ask(server, b, "How long does delivery to Scotland usually take?").headers["x-blink-cache"] == "miss"
    assert _ask(server, a, "What is the refund policy for damaged parcels?").headers["x-blink-cache"] == "exact"
    assert _ask(server, a, "What's the refund policy for damaged parcels?").headers["x-blink-cache"] == "semantic"


def test_system_prompt_and_parameters_split_namespaces(semantic: tuple[LiveServer, Any], keys: tuple[Path, str, str]) -> None:
    server, _ = semantic
    q = "How do I reset my router to factory settings?"
    _fill(semantic, keys[1], q)
    other_system = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": q}]
    assert _ask(server, keys[1], q, messages=other_system).headers["x-blink-cache"] == "miss"
    assert _ask(server, keys[1], q, max_tokens=3).headers["x-blink-cache"] == "miss"
    assert _ask(server, keys[1], q, temperature=0.5, seed=1).headers["x-blink-cache"] == "miss"


def test_multi_turn_is_keyed_on_the_conversation(semantic: tuple[LiveServer, Any], keys: tuple[Path, str, str]) -> None:
    server, _ = semantic

    def convo(product: str) -> list[dict[str, str]]:
        return [SYSTEM, {"role": "user", "content": f"I have a {product} subscription."},
                {"role": "assistant", "content": "How can I help?"}, {"role": "user", "content": "Cancel it."}]

    _fill(semantic, keys[1], "", messages=convo("Flixora"))
    assert _ask(server, keys[1], "", messages=convo("PulseFit")).headers["x-blink-cache"] == "miss"
    assert _ask(server, keys[1], "", messages=convo("Flixora")).headers["x-blink-cache"] == "exact"


def test_tool_requests_skip_the_semantic_cache(semantic: tuple[LiveServer, Any], keys: tuple[Path, str, str]) -> None:
    server, _ = semantic
    tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}]
    _fill(semantic, keys[1], "Where is my order number 1234?", tools=tools)
    assert _ask(server, keys[1], "Where's my order number 1234?", tools=tools).headers["x-blink-cache"] == "miss"


def test_semantic_hit_replays_as_a_stream(semantic: tuple[LiveServer, Any], keys: tuple[Path, str, str]) -> None:
    server, _ = semantic
    _fill(semantic, keys[1], "How do I book a table for Sunday lunch?")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=keys[1], max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="fake", temperature=0, stream=True, stream_options={"include_usage": True},
        messages=[SYSTEM, {"role": "user", "content": "How can I book a table for Sunday lunch?"}],  # type: ignore[list-item]
    )
    chunks = list(raw.parse())
    assert raw.headers["x-blink-cache"] == "semantic"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith(" t0")
    assert chunks[-1].usage is not None


def test_echo_completions_never_take_a_neighbours_answer(semantic: tuple[LiveServer, Any],
                                                         keys: tuple[Path, str, str]) -> None:
    """An echoed answer starts with its own prompt: a paraphrase's entry would show the wrong one."""
    server, app = semantic

    def complete(prompt: str) -> httpx.Response:
        return httpx.post(f"{server.url}/v1/completions", timeout=30, headers={"authorization": f"Bearer {keys[1]}"},
                          json={"model": "fake", "prompt": prompt, "temperature": 0, "echo": True, "max_tokens": 3})

    before = cache_entries(app)
    assert complete("How do I reset my router password?").headers["x-blink-cache"] == "miss"
    wait_entries(app, before + 1)
    assert complete("How can I reset my router password?").headers["x-blink-cache"] == "miss"
    assert complete("How do I reset my router password?").headers["x-blink-cache"] == "exact"
