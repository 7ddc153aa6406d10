"""The live dashboard in headless Chromium: it loads offline, its charts render and update.

Debian ``chromium`` driven by PyPI ``playwright`` (never ``playwright install``). The screenshot
is written to the test's tmp folder, and to ``$BLINK_SCREENSHOT_DIR`` when set, for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from live_server import LiveServer
from system_tools import require

_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def test_assets_and_stats_endpoints(gateway: LiveServer) -> None:
    page = httpx.get(f"{gateway.url}/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/dashboard/static/dashboard.js" in page.text and "http" not in page.text.replace("http-equiv", "")
    js = httpx.get(f"{gateway.url}/dashboard/static/dashboard.js")
    assert js.status_code == 200 and "EventSource" in js.text
    missing = httpx.get(f"{gateway.url}/dashboard/static/../../config.py")
    assert missing.status_code == 404 and "error" in missing.json()
    stats = httpx.get(f"{gateway.url}/dashboard/stats").json()
    assert len(stats["series"]["t"]) == 120 and {"requests", "cache", "routes", "breakers"} <= set(stats["totals"])
    with httpx.stream("GET", f"{gateway.url}/dashboard/events", timeout=5) as sse:
        assert sse.headers["content-type"].startswith("text/event-stream")
        for line in sse.iter_lines():
            if line.startswith("data: "):
                assert '"series"' in line
                break


@pytest.fixture
def traffic(gateway: LiveServer) -> Iterator[None]:
    """Streams a request every ~50 ms until the test ends (bounded: at most 400 requests)."""
    stop = threading.Event()
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)

    def loop() -> None:
        for _ in range(400):
            if stop.wait(0.05):
                return
            for _chunk in client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                                          stream=True, user="delay=0.004"):
                pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


def test_dashboard_renders_and_updates_in_chromium(gateway: LiveServer, traffic: None, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = require("chromium")
    external: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})

            def only_local(route) -> None:  # type: ignore[no-untyped-def]
                if route.request.url.startswith(gateway.url):
                    route.continue_()
                else:  # the page must work offline: nothing but the gateway may be fetched
                    external.append(route.request.url)
                    route.abort()

            page.route("**/*", only_local)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{gateway.url}/dashboard")
            page.wait_for_function("window.blinkDashboard && window.blinkDashboard.updates >= 3"
                                   " && window.blinkDashboard.drawn.ttft > 0 && window.blinkDashboard.drawn.itl > 0",
                                   timeout=20_000)
            first = page.evaluate("window.blinkDashboard.updates")
            page.wait_for_function(f"window.blinkDashboard.updates >= {first + 2}", timeout=10_000)
            # Lines were drawn: count opaque pixels of each chart's canvas.
            inked = page.evaluate("""() => Array.from(document.querySelectorAll('canvas')).map((c) => {
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })""")
            assert len(inked) == 4 and all(n > 500 for n in inked), inked
            assert page.inner_text("#conn") == "live"
            assert int(page.inner_text("#k-req")) > 0
            assert "fake" in page.inner_text("#routes")
            shot = tmp_path / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 20_000
    assert errors == [] and external == []
    if os.environ.get("BLINK_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["BLINK_SCREENSHOT_DIR"]) / "dashboard.png")
