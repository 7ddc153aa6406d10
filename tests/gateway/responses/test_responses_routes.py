"""``/v1/responses`` over a real gateway in front of a real OpenAI-compatible upstream, with real keys.

The upstream (tests/upstream_server.py) speaks chat completions only, so every request here also
proves the translation an ``openai_http`` upstream receives. The ``openai`` SDK parses every body and
event against its own Responses types; the stream's events are checked in the documented order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from live_server import LiveServer
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses.response_item_list import ResponseItemList
from pydantic import TypeAdapter
from upstream_server import FakeUpstream

from blink.config.gateway import AuthSettings, CacheSettings, ExactCacheSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.responses import ResponsesSettings
from blink.config.settings import Settings
from blink.gateway.auth.keys import SCOPE_ADMIN, ApiKeyStore
from blink.gateway.responses.items import MAX_INPUT_ITEMS
from blink.serve import build_app

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
# The budget of the small-budget gateway: a few stored responses of the fake upstream's size.
BUDGET = 6000


@dataclass
class Keys:
    url: str
    owner: openai.OpenAI  # tenant A
    same_tenant: openai.OpenAI  # tenant A, another key
    other: openai.OpenAI  # tenant B
    admin: openai.OpenAI
    owner_secret: str


def _settings(upstream: FakeUpstream, tmp: Path, budget: int | None = 1024**3,
              write_behind_s: float | None = 0.05) -> Settings:
    return Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
        auth=AuthSettings(enabled=True, keys_db=str(tmp / "keys.db")),
        responses=ResponsesSettings(path=str(tmp / "responses.db"), storage_budget_bytes=budget,
                                    write_behind_s=write_behind_s),
    )


def _keys(url: str, keys_db: Path) -> Keys:
    store = ApiKeyStore(keys_db)

    def client(tenant: str, scopes: list[str] | None = None) -> tuple[openai.OpenAI, str]:
        _, secret = store.create(tenant, scopes=scopes)
        return openai.OpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0), secret

    (owner, secret), (same, _), (other, _), (admin, _) = (
        client("tenant-a"), client("tenant-a"), client("tenant-b"), client("ops", [SCOPE_ADMIN]))
    return Keys(url, owner, same, other, admin, secret)


@pytest.fixture(scope="module")
def keys(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    tmp = tmp_path_factory.mktemp("responses")
    with LiveServer(build_app(_settings(upstream, tmp))) as live:
        yield _keys(live.url, tmp / "keys.db")


def _create(client: openai.OpenAI, **kw: Any) -> Any:
    return client.responses.create(model="fake", **kw)


def _error(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body if isinstance(exc.body, dict) else {}
    return body.get("error") or body


def test_create_translates_to_chat_and_returns_the_response_object(keys: Keys, upstream: FakeUpstream) -> None:
    r = _create(keys.owner, input="hi", instructions="be brief", max_output_tokens=50, temperature=0.5,
                metadata={"ticket": "42"}, user="tokens=3")
    assert (r.object, r.status, r.output_text) == ("response", "completed", " t0 t1 t2")
    assert r.metadata == {"ticket": "42"} and r.instructions == "be brief" and r.store is True
    assert r.usage is not None and r.usage.output_tokens == 3 and r.usage.input_tokens_details.cached_tokens == 0
    sent = upstream.requests[-1]
    assert sent["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert (sent["max_completion_tokens"], sent["temperature"], sent["metadata"]) == (50, 0.5, {"ticket": "42"})
    assert "store" not in sent and "input" not in sent


def test_truncated_output_is_incomplete_with_its_reason(keys: Keys) -> None:
    r = _create(keys.owner, input="hi", max_output_tokens=2, user="tokens=5")  # the upstream stops: "length"
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert (r.output[0].type, r.output[0].status, r.output_text) == ("message", "incomplete", " t0 t1")
    with keys.owner.responses.stream(model="fake", input="hi", max_output_tokens=2, user="tokens=5") as stream:
        kinds = [e.type for e in stream]
    assert kinds[-1] == "response.incomplete"


def test_stream_events_in_documented_order(keys: Keys) -> None:
    with keys.owner.responses.stream(model="fake", input="s", user="tokens=3") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 3,
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == " t0 t1 t2" and keys.owner.responses.retrieve(final.id).output_text == " t0 t1 t2"


def test_tool_call_round_trip_through_a_chat_upstream(keys: Keys, upstream: FakeUpstream) -> None:
    r = _create(keys.owner, input="Weather in Paris?", tools=[WEATHER], tool_choice={"type": "function",
                "name": "get_weather"}, parallel_tool_calls=False, user="tokens=2")
    sent = upstream.requests[-1]
    assert sent["tools"] == [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False
    follow = _create(keys.owner, previous_response_id=r.id, tools=[WEATHER], user="tokens=1", input=[
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
    assert follow.status == "completed"
    messages = upstream.requests[-1]["messages"]
    assert messages[-2] == {"role": "assistant", "content": " t0 t1", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


def test_previous_response_id_replays_three_turns(keys: Keys, upstream: FakeUpstream) -> None:
    one = _create(keys.owner, input="one", user="tokens=1", instructions="only for turn one")
    two = _create(keys.owner, input="two", previous_response_id=one.id, user="tokens=2")
    three = _create(keys.owner, input=[{"role": "user", "content": [{"type": "input_text", "text": "three"}]}],
                    previous_response_id=two.id, user="tokens=3")
    assert three.previous_response_id == two.id
    assert upstream.requests[-1]["messages"] == [  # instructions are not carried over (OpenAI's rule)
        {"role": "user", "content": "one"}, {"role": "assistant", "content": " t0"},
        {"role": "user", "content": "two"}, {"role": "assistant", "content": " t0 t1"},
        {"role": "user", "content": "three"}]
    items = keys.owner.responses.input_items.list(three.id)
    assert [i.content[0].text for i in items.data] == ["three"]  # type: ignore[union-attr]


def test_input_items_paginate_like_openai(keys: Keys) -> None:
    r = _create(keys.owner, user="tokens=1", input=[{"role": "user", "content": f"m{i}"} for i in range(5)])
    page = keys.owner.responses.input_items.list(r.id, limit=2, order="asc")
    assert [i.content[0].text for i in page.data] == ["m0", "m1"] and page.has_more  # type: ignore[union-attr]
    rest = keys.owner.responses.input_items.list(r.id, limit=10, order="asc", after=page.data[-1].id)
    assert [i.content[0].text for i in rest.data] == ["m2", "m3", "m4"] and not rest.has_more  # type: ignore[union-attr]
    newest = keys.owner.responses.input_items.list(r.id, limit=1)
    assert newest.data[0].content[0].text == "m4"  # type: ignore[union-attr]  # desc by default
    all_items = list(keys.owner.responses.input_items.list(r.id, limit=2, order="asc"))  # auto-pagination
    assert len(all_items) == 5


def _not_found(call: Any, *args: Any, **kw: Any) -> dict[str, Any]:
    with pytest.raises(openai.NotFoundError) as exc:
        call(*args, **kw)
    return _error(exc.value)


def test_stored_responses_belong_to_their_key(keys: Keys) -> None:
    r = _create(keys.owner, input="secret", user="tokens=1")
    for client in (keys.same_tenant, keys.other):
        assert _not_found(client.responses.retrieve, r.id)["param"] == "response_id"
        assert _not_found(client.responses.input_items.list, r.id)["code"] == "not_found"
        _not_found(client.responses.delete, r.id)
        err = _not_found(_create, client, input="x", previous_response_id=r.id)
        assert err["param"] == "previous_response_id"
    missing = _not_found(keys.owner.responses.retrieve, "resp_" + "0" * 48)
    assert missing == _not_found(keys.other.responses.retrieve, r.id) | {"message": missing["message"]}
    assert keys.admin.responses.retrieve(r.id).id == r.id  # the admin scope reaches every object
    keys.owner.responses.delete(r.id)
    _not_found(keys.owner.responses.retrieve, r.id)
    _not_found(keys.owner.responses.delete, r.id)


def test_store_false_keeps_nothing(keys: Keys) -> None:
    r = _create(keys.owner, input="x", store=False, user="tokens=1")
    assert r.store is False
    _not_found(keys.owner.responses.retrieve, r.id)


def test_a_stream_that_fails_midway_ends_with_response_failed(keys: Keys) -> None:
    resp = httpx.post(f"{keys.url}/v1/responses", headers={"authorization": f"Bearer {keys.owner_secret}"},
                      json={"model": "fake", "input": "x", "stream": True, "user": "tokens=5;error_after=2"},
                      timeout=30)
    assert resp.status_code == 200
    events = [EVENTS.validate_python(orjson.loads(line[6:])) for line in resp.text.splitlines()
              if line.startswith("data: ")]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-2:] == ["error", "response.failed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None and failed.output[0].status == "incomplete"
    for line in resp.text.splitlines():  # every SSE record names its event
        assert not line or line.startswith(("event: ", "data: "))


def test_an_upstream_error_before_the_first_token_is_a_status(keys: Keys) -> None:
    with pytest.raises(openai.RateLimitError):
        _create(keys.owner, input="x", user="fail=429")


@pytest.mark.parametrize(("body", "param"), [
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]}, "input[0].output"),
    ({"input": [{"type": "function_call", "call_id": "", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": [{"role": "user", "content": "x", "extra": 1}]}, "input[0].extra"),
    ({"input": ["not an object"]}, "input[0]"),
    ({"input": []}, "input"),
    ({}, "input"),
    ({"input": [{"role": "user", "content": "x"}] * (MAX_INPUT_ITEMS + 1)}, "input"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]}, "tools[0].type"),
    ({"input": "x", "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice"),
    ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "include": ["message.output_text.logprobs"]}, "include"),
    ({"input": "x", "truncation": "auto"}, "truncation"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "text": {"verbosity": "low"}}, "text.verbosity"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": "x", "metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"input": "x", "temperature": 9}, "temperature"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "no_such_field": 1}, "no_such_field"),
    ({"input": "x", "previous_response_id": "resp_nope"}, "previous_response_id"),
])
def test_hostile_and_unsupported_inputs_are_refused_by_name(keys: Keys, body: dict[str, Any], param: str) -> None:
    resp = httpx.post(f"{keys.url}/v1/responses", headers={"authorization": f"Bearer {keys.owner_secret}"},
                      json={"model": "fake", **body}, timeout=30)
    assert resp.status_code in (400, 404), resp.text
    err = resp.json()["error"]
    assert err["param"] == param, err
    assert "Traceback" not in resp.text and "/blink/" not in resp.text


def test_bad_list_parameters_are_400(keys: Keys) -> None:
    r = _create(keys.owner, input="x", user="tokens=1")
    auth = {"authorization": f"Bearer {keys.owner_secret}"}
    for query, param in (("limit=0", "limit"), ("limit=abc", "limit"), ("order=up", "order"),
                         ("after=msg_nope", "after"), ("include=x", "include"),
                         ("limit=%C2%B2", "limit"), ("limit=" + "1" * 5000, "limit")):
        resp = httpx.get(f"{keys.url}/v1/responses/{r.id}/input_items?{query}", headers=auth)
        assert (resp.status_code, resp.json()["error"]["param"]) == (400, param)


def test_the_tenant_budget_evicts_the_oldest(upstream: FakeUpstream, tmp_path: Path) -> None:
    # Evictions happen as a batch is written: with each reply waiting for its commit (the group-commit
    # mode), a read right after a reply sees them.
    with LiveServer(build_app(_settings(upstream, tmp_path, budget=BUDGET, write_behind_s=None))) as live:
        k = _keys(live.url, tmp_path / "keys.db")
        ids = [_create(k.owner, input="x" * 200, user="tokens=2").id for _ in range(8)]
        kept = []
        for rid in ids:
            try:
                kept.append(k.owner.responses.retrieve(rid).id)
            except openai.NotFoundError:
                pass
        assert 0 < len(kept) < len(ids) and kept == ids[-len(kept):]  # the newest survive
        other = _create(k.other, input="y", user="tokens=1")  # another tenant's budget is its own
        assert k.other.responses.retrieve(other.id).id == other.id
        assert k.owner.responses.retrieve(ids[-1]).id == ids[-1]
        too_big = _create(k.owner, input="z" * (BUDGET + 1), user="tokens=1")  # alone over the budget
        assert too_big.store is False
        _not_found(k.owner.responses.retrieve, too_big.id)
        assert k.owner.responses.retrieve(ids[-1]).id == ids[-1]  # and it evicted nothing


def test_metrics_label_the_api(keys: Keys) -> None:
    _create(keys.owner, input="x", user="tokens=1")
    text = httpx.get(f"{keys.url}/metrics").text
    assert 'route="responses"' in text


def test_an_exact_cache_hit_is_rendered_as_a_response(upstream: FakeUpstream, tmp_path: Path) -> None:
    settings = _settings(upstream, tmp_path)
    settings.cache = CacheSettings(exact=ExactCacheSettings(enabled=True), store="memory")
    with LiveServer(build_app(settings)) as live:
        k = _keys(live.url, tmp_path / "keys.db")
        kw: dict[str, Any] = {"input": "cache me", "temperature": 0, "user": "tokens=3"}
        first = _create(k.owner, **kw)
        sent = len(upstream.requests)
        for _ in range(20):  # the fill is scheduled off the request path
            raw = k.owner.responses.with_raw_response.create(model="fake", **kw)
            if raw.headers.get("x-blink-cache") == "exact":
                break
        assert raw.headers.get("x-blink-cache") == "exact" and len(upstream.requests) <= sent + 19
        hit = raw.parse()
        assert hit.output_text == first.output_text and hit.id != first.id and hit.status == "completed"
        assert k.owner.responses.retrieve(hit.id).output_text == first.output_text  # a hit is stored too
        with k.owner.responses.stream(model="fake", **kw) as stream:
            assert stream.get_final_response().output_text == first.output_text


def test_bodies_and_events_validate_against_the_sdk_types(keys: Keys) -> None:
    """The SDK builds its objects without validation: validate ours against its types explicitly."""
    auth = {"authorization": f"Bearer {keys.owner_secret}"}
    body = {"model": "fake", "input": "x", "user": "tokens=2", "metadata": {"a": "b"}, "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"}}
    whole = httpx.post(f"{keys.url}/v1/responses", headers=auth, json=body, timeout=30).json()
    Response.model_validate(whole)
    Response.model_validate(httpx.get(f"{keys.url}/v1/responses/{whole['id']}", headers=auth).json())
    for extra in ({}, {"max_output_tokens": 1}):
        streamed = httpx.post(f"{keys.url}/v1/responses", headers=auth, json={**body, **extra, "stream": True},
                              timeout=30)
        events = [EVENTS.validate_python(orjson.loads(line[6:])) for line in streamed.text.splitlines()
                  if line.startswith("data: ")]
        assert events[-1].type == ("response.incomplete" if extra else "response.completed")
    page = httpx.get(f"{keys.url}/v1/responses/{whole['id']}/input_items", headers=auth).json()
    ResponseItemList.model_validate(page)
