"""Spans reach a real OTLP/HTTP receiver: one server span per request, a child per stage."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest
from live_server import LiveServer
from otlp_receiver import OTLPReceiver, attrs
from upstream_server import FakeUpstream

from blink.config.gateway import ObsSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.obs.observer import Observability
from blink.obs.setup import build_observability
from blink.serve import build_app


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[OTLPReceiver, str]]:
    rec = OTLPReceiver()
    with LiveServer(rec) as server:
        yield rec, server.url


def test_request_produces_genai_span_tree(receiver: tuple[OTLPReceiver, str], obs_upstream: FakeUpstream) -> None:
    rec, url = receiver
    settings = Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=obs_upstream.base_url)],
        obs=ObsSettings(otlp_endpoint=url, request_log="off"),
    )
    parent_trace = "0af7651916cd43dd8448eb211c80319c"
    with LiveServer(build_app(settings)) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        resp = client.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0.5,
            extra_headers={"traceparent": f"00-{parent_trace}-b7ad6b7169203331-01"},
        )
    # Stopping the server shut the provider down, which flushed the batch processor.
    deadline = time.monotonic() + 10
    while not rec.spans and time.monotonic() < deadline:
        time.sleep(0.05)
    by_name = {s.name: s for s in rec.spans}
    root = by_name["chat fake"]
    a = attrs(root)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "fake"
    assert a["gen_ai.request.max_tokens"] == 5
    assert a["gen_ai.request.temperature"] == 0.5
    assert a["gen_ai.usage.output_tokens"] == 5
    assert a["gen_ai.response.finish_reasons"] == ["length"]
    assert a["gen_ai.response.id"] == resp.id
    assert a["http.response.status_code"] == 200
    assert root.trace_id.hex() == parent_trace  # the client's trace context is continued
    for stage in ("blink.parse", "blink.resolve", "blink.backend_ttft", "blink.stream"):
        child = by_name[stage]
        assert child.parent_span_id == root.span_id and child.trace_id == root.trace_id
        assert root.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
        assert child.end_time_unix_nano <= root.end_time_unix_nano
    ttft_ns = by_name["blink.backend_ttft"].end_time_unix_nano - root.start_time_unix_nano
    assert abs(ttft_ns / 1e6 - a["blink.ttft_ms"]) < 1.0


def test_no_endpoint_means_no_tracing_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    obs: Observability = build_observability(ObsSettings(request_log="off"))
    assert obs.tracing is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    obs2 = build_observability(ObsSettings(request_log="off"))
    assert obs2.tracing is not None
    obs2.close()


def test_parent_based_sampling(receiver: tuple[OTLPReceiver, str]) -> None:
    from blink.obs.trace import RequestTrace
    from blink.obs.tracing import Tracing

    rec, url = receiver
    rec.spans.clear()
    tracing = Tracing.otlp(url, sample_ratio=0.0)

    def finished(traceparent: str | None, model: str) -> RequestTrace:
        t = RequestTrace(route="chat", model=model, traceparent=traceparent)
        t.add_stage("parse", t.start, 0.001)
        t.end = t.start + 0.01
        return t

    tracing.export(finished(None, "a"))  # ratio 0: not sampled
    tracing.export(finished("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "b"))  # caller: no
    tracing.export(finished("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "c"))  # caller: yes
    tracing.shutdown()  # flushes
    assert sorted(s.name for s in rec.spans) == ["blink.parse", "chat c"]
    root = next(s for s in rec.spans if s.name == "chat c")
    assert root.parent_span_id.hex() == "b7ad6b7169203331"


def test_collector_down_drops_spans_without_raising() -> None:
    from blink.obs.otlp import OTLPExporter
    from blink.obs.trace import RequestTrace
    from blink.obs.tracing import span_attributes

    exporter = OTLPExporter("http://127.0.0.1:9", "blink", span_attributes, timeout_s=1)  # nothing listens
    exporter.submit(RequestTrace(route="chat", model="m"), None, None)
    exporter.shutdown()
    assert exporter.dropped == 1 and exporter.exported == 0
