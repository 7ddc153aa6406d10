"""One JSON line per request, with the fields operators grep for; prompts only when enabled, redacted."""

from __future__ import annotations

import asyncio
import io
import time

import openai
import orjson
from live_server import LiveServer

from blink.obs.redact import redact
from blink.obs.request_log import RequestLogger
from blink.obs.trace import RequestTrace


def _lines(buf: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in buf.getvalue().splitlines() if line]


def test_one_line_per_request_with_redacted_prompt(obs_gateway: LiveServer, log_buffer: io.StringIO) -> None:
    client = openai.OpenAI(base_url=f"{obs_gateway.url}/v1", api_key="sk-secretsecretsecret", max_retries=0)
    start = len(_lines(log_buffer))
    resp = client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "mail me at jane.doe@example.com or +1 415 555 0100"}])
    deadline = time.monotonic() + 5
    while len(_lines(log_buffer)) == start and time.monotonic() < deadline:
        time.sleep(0.01)
    new = _lines(log_buffer)[start:]
    assert len(new) == 1
    rec = new[0]
    assert rec["request_id"] == resp.id and rec["model"] == "fake" and rec["backend"] == "fake"
    assert rec["route"] == "chat" and rec["status"] == 200 and rec["cache"] == "none"
    assert rec["completion_tokens"] == 8 and rec["tokens_per_s"] > 0
    assert 0 < rec["ttft_ms"] <= rec["total_ms"]
    assert "jane.doe" not in rec["prompt"] and "[EMAIL]" in rec["prompt"] and "[PHONE]" in rec["prompt"]
    assert rec["output"] == "".join(f" t{k}" for k in range(8))
    assert "sk-secret" not in log_buffer.getvalue()


def test_prompts_are_absent_unless_enabled() -> None:
    buf = io.StringIO()
    trace = RequestTrace(route="chat", model="m", prompt=[{"role": "user", "content": "secret"}], key_id="key_1")
    RequestLogger(buf).write(trace)
    rec = orjson.loads(buf.getvalue())
    assert "prompt" not in rec and "output" not in rec and rec["key_id"] == "key_1"


def test_redaction_patterns() -> None:
    text = ("key sk-abcdefghijklmnop1234, Bearer abcdefghijklmnopqrst, card 4111 1111 1111 1111, "
            "ssn 123-45-6789, ip 10.1.2.3, mail a.b+c@d.example.org, phone (415) 555-0100")
    out = redact(text)
    for tag in ("[KEY]", "Bearer [KEY]", "[CARD]", "[SSN]", "[IP]", "[EMAIL]", "[PHONE]"):
        assert tag in out, (tag, out)
    for secret in ("abcdefghijklmnop1234", "4111", "123-45", "10.1.2.3", "a.b+c", "555-0100"):
        assert secret not in out, (secret, out)
    assert redact("the answer is 42, in 2024") == "the answer is 42, in 2024"


def test_lines_from_the_event_loop_go_out_together_and_on_close() -> None:
    class CountingBuffer(io.StringIO):
        writes = 0

        def write(self, s: str) -> int:
            CountingBuffer.writes += 1
            return super().write(s)

        def close(self) -> None:  # kept open so the test can read what closing flushed
            pass

    async def scenario() -> tuple[int, int, int]:
        buf = CountingBuffer()
        log = RequestLogger(buf)
        for i in range(5):
            log.write(RequestTrace(route="chat", model=f"m{i}"))
        held = len(_lines(buf))
        await asyncio.sleep(0.2)  # past the flush delay: one write for all five
        flushed = len(_lines(buf))
        log.write(RequestTrace(route="chat", model="last"))
        log.close()  # closing flushes what the timer has not written yet
        return held, flushed, len(_lines(buf))

    assert asyncio.run(scenario()) == (0, 5, 6)
    assert CountingBuffer.writes == 2
