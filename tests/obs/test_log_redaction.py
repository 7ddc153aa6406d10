"""Credentials never reach a log line: unit cases, and ``blink serve --log-level debug`` end to end."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import httpx
import pytest
from live_server import LiveServer
from servers import free_port
from upstream_server import FakeUpstream
from uvicorn.logging import AccessFormatter

from blink.obs.log_redaction import REDACTED, SecretRedactingFilter, redact_secrets

SECRET = "bk-0a1b2c3d-s3cr3tS3cr3tS3cr3tS3cr3t"


@pytest.mark.parametrize("text", [
    f"GET /v1/models?api_key={SECRET} HTTP/1.1",
    f"GET /v1/models?limit=2&key={SECRET}&x=1",
    f"/x?access_token={SECRET}#frag",
    f"/x?TOKEN={SECRET}",
    f"Authorization: Bearer {SECRET}",
    f"{{'authorization': 'Bearer {SECRET}'}}",
    f"x-api-key: {SECRET}",
    f"sending Bearer {SECRET} upstream",
])
def test_secrets_are_replaced(text: str) -> None:
    out = redact_secrets(text)
    assert SECRET not in out and REDACTED in out


def test_ordinary_urls_are_untouched() -> None:
    for text in ("GET /v1/models?limit=2&monkey=1 HTTP/1.1", "/dashboard/static/dashboard.js", "tokens=5"):
        assert redact_secrets(text) == text


def test_the_access_log_formatter_still_gets_its_arguments() -> None:
    """uvicorn's access formatter unpacks five arguments: the filter keeps their shape."""
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", f"/v1/models?api_key={SECRET}", "1.1", 200), None)
    assert SecretRedactingFilter().filter(record)
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False).format(record)
    assert SECRET not in line and f"/v1/models?api_key={REDACTED}" in line


def test_blink_serve_at_debug_level_logs_no_key() -> None:
    """The real server, its access log on: a key in the query string and in headers stays out of the output."""
    up = FakeUpstream(tokens=2)
    with LiveServer(up) as upstream:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "blink.cli", "serve", "--upstream", f"{upstream.url}/v1",
             "--served-model-name", "fake", "--port", str(port), "--log-level", "debug"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, "blink serve exited"
                try:
                    if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "blink serve did not become ready"
                time.sleep(0.1)
            assert httpx.get(f"{url}/v1/models?api_key={SECRET}").status_code == 200
            httpx.post(f"{url}/v1/chat/completions?key={SECRET}", headers={"authorization": f"Bearer {SECRET}"},
                       json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
            time.sleep(0.3)
        finally:
            proc.terminate()
            try:
                output, _ = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
    assert "/v1/models?api_key=" in output  # the access log line is there...
    assert SECRET not in output and SECRET.split("-")[-1] not in output  # ...without the key
