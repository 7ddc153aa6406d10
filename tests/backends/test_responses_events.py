"""An ``openai_http`` upstream that serves ``/v1/responses`` natively (``native_apis: [responses]``).

The upstream here is another Blink gateway (which serves the Responses API) in front of the fake
chat upstream: the front gateway must send it Responses requests (conversation inline, nothing
stored upstream) and turn its events back into the same answers, stream failures included. The
decoder is also checked against the renderer's own events (text and tool calls round trip).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.base import Delta, Usage
from blink.backends.responses_events import ResponsesEventDecoder, deltas_from_response
from blink.config.models import OpenAIHTTPModel
from blink.config.responses import ResponsesSettings
from blink.config.settings import Settings
from blink.gateway.responses.render import ResponseRenderer, sse
from blink.protocol.responses import ResponsesRequest
from blink.serve import build_app


def _responses_served(url: str) -> float:
    """Requests the upstream gateway served on its /v1/responses (its metrics)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(float(m) for m in re.findall(r'blink_requests_total\{[^}]*route="responses"[^}]*\} (\S+)', text))


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=8)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


@pytest.fixture(scope="module")
def gateways(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("native")
    inner = Settings(models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url)],
                     responses=ResponsesSettings(path=str(tmp / "inner.db")))
    with LiveServer(build_app(inner)) as inner_live:
        front = Settings(
            models=[OpenAIHTTPModel(name="front", kind="openai_http", base_url=f"{inner_live.url}/v1",
                                  upstream_model="fake", native_apis=["responses"])],
            responses=ResponsesSettings(path=str(tmp / "front.db")))
        with LiveServer(build_app(front)) as front_live:
            yield front_live.url, inner_live.url


def test_requests_go_to_the_upstreams_responses_api(gateways: tuple[str, str], upstream: FakeUpstream) -> None:
    front, inner = gateways
    client = openai.OpenAI(base_url=f"{front}/v1", api_key="x", max_retries=0)
    before = _responses_served(inner)
    one = client.responses.create(model="front", input="one", user="tokens=2", instructions="brief")
    two = client.responses.create(model="front", input="two", user="tokens=3", previous_response_id=one.id)
    assert (one.output_text, two.output_text) == (" t0 t1", " t0 t1 t2")
    assert two.usage is not None and two.usage.output_tokens == 3
    assert _responses_served(inner) == before + 2  # not translated to chat by the front gateway
    # The state stays in the front gateway: the conversation went inline; instructions only on turn one.
    assert upstream.requests[-1]["messages"] == [{"role": "user", "content": "one"},
                                                 {"role": "assistant", "content": " t0 t1"},
                                                 {"role": "user", "content": "two"}]
    with client.responses.stream(model="front", input="s", user="tokens=2") as stream:
        assert [e.type for e in stream][-1] == "response.completed"
        assert stream.get_final_response().output_text == " t0 t1"


def test_an_upstream_failure_midway_ends_the_stream_with_response_failed(gateways: tuple[str, str]) -> None:
    front, _ = gateways
    with httpx.stream("POST", f"{front}/v1/responses", timeout=30,
                      json={"model": "front", "input": "x", "stream": True, "user": "tokens=5;error_after=2"}) as r:
        kinds = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "response.created" and kinds[-2:] == ["error", "response.failed"]


def _render(deltas: list[Delta]) -> list[bytes]:
    r = ResponseRenderer("resp_1", "m", ResponsesRequest(input="x"), [], "auto")
    events = r.start()
    for d in deltas:
        events += r.feed(d)
    return events + r.finish() + [r.terminal()]


def test_the_decoder_reads_back_what_the_renderer_writes() -> None:
    head = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}
    args = {"index": 0, "function": {"arguments": '{"x": 1}'}}
    sent = [Delta(text="Hi"), Delta(text=" there"), Delta(tool_calls=[head]), Delta(tool_calls=[args]),
            Delta(finish_reason="tool_calls", usage=Usage(5, 4, 2))]
    body = sse(_render(sent))
    decoder = ResponsesEventDecoder("up")
    got = [d for k in range(0, len(body), 7) for d in decoder.feed(body[k:k + 7])]  # split anywhere
    assert decoder.done and decoder.error is None
    assert "".join(d.text for d in got) == "Hi there"
    calls = [c for d in got for c in d.tool_calls or ()]
    assert calls == [head | {"function": {"name": "f", "arguments": ""}}, args]
    assert (got[-1].finish_reason, got[-1].usage) == ("tool_calls", Usage(5, 4, 2))
    final = orjson.loads(_render(sent)[-1].split(b"\ndata: ", 1)[1])["response"]  # response.completed
    whole = deltas_from_response(final, "up")  # type: ignore[arg-type]
    assert "".join(d.text for d in whole) == "Hi there" and whole[-1].finish_reason == "tool_calls"


def test_a_malformed_event_is_an_upstream_error() -> None:
    decoder = ResponsesEventDecoder("up")
    assert list(decoder.feed(b"data: {nope\n\n")) == [] and decoder.error is not None
    assert decoder.error.status == 502
