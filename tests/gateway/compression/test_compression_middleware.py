"""Prompt compression end to end: a real gateway whose embedded tiny model scores the context
that a real upstream (the expensive tier) then receives, shortened; what must not change, doesn't."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import LiveServer
from pydantic import ValidationError
from upstream_server import FakeUpstream

from blink.config.compression import CompressionSettings
from blink.config.cost import CostSettings, ModelPrice
from blink.config.models import EmbeddedModel, OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.serve import build_app

DOCUMENT = (
    "The quarterly report of the northern warehouse lists every shipment that left the loading dock "
    "between January and March. Most of the shipments were small parcels for local customers, and the "
    "largest single order was a pallet of copper fittings sent to the harbour office on the twelfth of "
    "February. The report also notes that the second forklift was out of service for nine days.\n"
    "Staffing stayed the same as in the previous quarter, with four people on the morning shift."
)
CODE = "```python\ndef total(xs):\n    return sum(x for x in xs if x > 0)\n```"
SYSTEM = "You answer questions about the warehouse report, briefly and exactly."
QUESTION = "Which order was the largest, and where did it go?"
PRICE = ModelPrice(input=1000.0, output=3000.0)


@pytest.fixture(scope="module")
def stack(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, FakeUpstream, Any]]:
    up = FakeUpstream(tokens=4)
    usage_db = tmp_path_factory.mktemp("compression") / "usage.db"
    with LiveServer(up) as upstream:
        settings = Settings(
            server=ServerSettings(max_tokens_limit=64),
            models=[
                EmbeddedModel(name="scorer", kind="embedded", model=str(tiny_llama), dtype="float32", threads=1,
                              max_model_len=2048, max_num_seqs=8),
                OpenAIHTTPModel(name="big", kind="openai_http", base_url=f"{upstream.url}/v1", read_timeout_s=30,
                              compression=CompressionSettings(scorer="scorer", ratio=2.0, min_chars=64)),
                OpenAIHTTPModel(name="bigq", kind="openai_http", base_url=f"{upstream.url}/v1", read_timeout_s=30,
                              compression=CompressionSettings(scorer="scorer", ratio=2.0, min_chars=64,
                                                              condition_on_question=True)),
            ],
            default_model="big",
            cost=CostSettings(prices={"big": PRICE}, path=str(usage_db)),
        )
        app = build_app(settings)
        with LiveServer(app) as gateway:
            yield gateway, up, app


def _chat(gateway: LiveServer, messages: list[dict[str, object]], stream: bool = False,
          model: str = "big") -> httpx.Response:  # fmt: skip
    body = {"model": model, "messages": messages, "max_tokens": 4, "stream": stream}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)


def test_long_context_is_shortened_and_protected_spans_are_not(stack: tuple[LiveServer, FakeUpstream, Any]) -> None:
    gateway, up, _ = stack
    messages: list[dict[str, object]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Here is the report:\n{DOCUMENT}\n{CODE}"},
        {"role": "assistant", "content": "Thank you, I have read the report."},
        {"role": "user", "content": QUESTION},
    ]
    resp = _chat(gateway, messages)
    assert resp.status_code == 200, resp.text
    saved = int(resp.headers["x-blink-compressed-tokens"])
    assert saved > 0
    sent = up.requests[-1]["messages"]
    assert sent[0] == {"role": "system", "content": SYSTEM}
    assert sent[-1] == {"role": "user", "content": QUESTION}
    assert sent[2]["content"] == "Thank you, I have read the report."  # shorter than min_chars
    context = sent[1]["content"]
    assert CODE in context and context.startswith("Here")
    assert len(context) < len(f"Here is the report:\n{DOCUMENT}\n{CODE}") * 0.8
    kept = context.replace(CODE, "").split()
    source = iter(f"Here is the report:\n{DOCUMENT}".split())
    assert all(any(w == k for w in source) for k in kept)  # words dropped, none invented or reordered


def test_streamed_answer_carries_the_header_and_the_saving_is_accounted(
    stack: tuple[LiveServer, FakeUpstream, Any],
) -> None:
    gateway, _, app = stack
    messages: list[dict[str, object]] = [{"role": "tool", "content": DOCUMENT, "tool_call_id": "c1"},
                                         {"role": "user", "content": QUESTION}]
    resp = _chat(gateway, messages, stream=True)
    assert resp.status_code == 200 and "data: [DONE]" in resp.text
    saved = int(resp.headers["x-blink-compressed-tokens"])
    assert saved > 0
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'blink_compression_requests_total{model="big",outcome="compressed"}' in metrics
    assert 'blink_compression_removed_tokens_total{model="big"}' in metrics
    rows = app.state.front.cost.ledger.rows()  # written behind to SQLite; the counters are current
    assert sum(row.saved_usd for row in rows.values()) >= saved * PRICE.input / 1e6 * 0.999


def test_short_or_protected_requests_pass_unchanged(stack: tuple[LiveServer, FakeUpstream, Any]) -> None:
    gateway, up, _ = stack
    messages: list[dict[str, object]] = [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": DOCUMENT}]
    resp = _chat(gateway, messages)
    assert resp.status_code == 200
    assert "x-blink-compressed-tokens" not in resp.headers
    assert up.requests[-1]["messages"] == messages


def test_compression_needs_an_embedded_scorer_and_an_upstream_tier() -> None:
    up = OpenAIHTTPModel(name="big", kind="openai_http", base_url="http://127.0.0.1:9/v1",
                       compression=CompressionSettings(scorer="big"))
    with pytest.raises(ValidationError, match="compression.scorer"):
        Settings(models=[up])
    with pytest.raises(ValidationError, match="openai_http"):
        EmbeddedModel(name="e", kind="embedded", compression=CompressionSettings(scorer="e"))


def test_question_aware_scoring_keeps_other_words_and_still_protects_spans(
    stack: tuple[LiveServer, FakeUpstream, Any],
) -> None:
    gateway, up, _ = stack
    messages: list[dict[str, object]] = [
        {"role": "user", "content": f"Here is the report:\n{DOCUMENT}\n{CODE}"},
        {"role": "assistant", "content": "Thank you, I have read the report."},
        {"role": "user", "content": QUESTION},
    ]
    kept = {}
    for model in ("big", "bigq"):
        resp = _chat(gateway, messages, model=model)
        assert resp.status_code == 200, resp.text
        assert int(resp.headers["x-blink-compressed-tokens"]) > 0
        sent = up.requests[-1]["messages"]
        assert sent[-1] == {"role": "user", "content": QUESTION} and CODE in sent[0]["content"]
        kept[model] = sent[0]["content"].replace(CODE, "").split()
        source = iter(f"Here is the report:\n{DOCUMENT}".split())
        assert all(any(w == k for w in source) for k in kept[model])
    # Given the question first, the scorer's log-probabilities (so the words it keeps) change: the
    # conditioned tokens were split at the question's end, not scored without it.
    assert kept["bigq"] != kept["big"]
