"""The live dashboard: it loads offline and renders in headless Chromium, viewers share one snapshot
a second up to a cap, and with API keys on it needs the dashboard scope (header or session cookie).

Debian ``chromium`` driven by PyPI ``playwright`` (never ``playwright install``). The screenshot
is written to the test's tmp folder, and to ``$BLINK_SCREENSHOT_DIR`` when set, for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from live_server import LiveServer
from system_tools import require
from upstream_server import FakeUpstream

from blink.config.gateway import AuthSettings
from blink.gateway.auth.keys import ApiKeyStore
from blink.gateway.http.dispatch import GatewayApp
from blink.serve import build_app
from tests.gateway.gateway_helpers import gateway_settings

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


# --- shared snapshots and the viewer cap -------------------------------------------------------


def _viewer(url: str, events: list[int], stop: threading.Event, headers: dict[str, str] | None = None) -> None:
    """Reads ``url``'s SSE feed, counting data events into ``events[0]`` until ``stop``."""
    with httpx.stream("GET", url, headers=headers, timeout=10) as sse:
        assert sse.status_code == 200
        for line in sse.iter_lines():
            if line.startswith("data: "):
                events[0] += 1
            if stop.is_set():
                return


@pytest.fixture(scope="module")
def watched(upstream: FakeUpstream) -> Iterator[tuple[LiveServer, GatewayApp]]:
    app = build_app(gateway_settings(upstream, dashboard_max_viewers=12))
    with LiveServer(app) as server:
        yield server, app


def test_viewers_share_one_snapshot_a_second(watched: tuple[LiveServer, GatewayApp]) -> None:
    server, app = watched
    feed = app.state.dashboard_feed
    stop = threading.Event()
    counts = [[0] for _ in range(8)]
    threads = [threading.Thread(target=_viewer, args=(f"{server.url}/dashboard/events", c, stop), daemon=True)
               for c in counts]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while feed.viewers < 8 or not all(c[0] for c in counts):
        assert time.monotonic() < deadline, "the viewers did not connect"
        time.sleep(0.02)
    before = feed.builds
    time.sleep(2.2)
    built = feed.builds - before
    stop.set()
    for t in threads:
        t.join(timeout=5)
    assert all(c[0] >= 3 for c in counts), counts  # every viewer got the snapshots of those seconds
    assert 1 <= built <= 4, built  # about one build a second for all 8 viewers, not one per viewer


def test_viewers_over_the_cap_get_503(watched: tuple[LiveServer, GatewayApp]) -> None:
    server, app = watched
    feed = app.state.dashboard_feed
    stop = threading.Event()
    counts = [[0] for _ in range(12)]
    threads = [threading.Thread(target=_viewer, args=(f"{server.url}/dashboard/events", c, stop), daemon=True)
               for c in counts]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while feed.viewers < 12:
            assert time.monotonic() < deadline, "the viewers did not connect"
            time.sleep(0.02)
        over = httpx.get(f"{server.url}/dashboard/events", timeout=5)
        assert over.status_code == 503 and over.headers["retry-after"] == "5"
        assert over.json()["error"]["type"] == "server_overloaded"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
    deadline = time.monotonic() + 5
    while feed.viewers:  # closed streams give their places back
        assert time.monotonic() < deadline, feed.viewers
        time.sleep(0.05)


# --- behind API keys ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, ApiKeyStore]]:
    db = tmp_path_factory.mktemp("dashboard-keys") / "keys.db"
    settings = gateway_settings(upstream)
    settings.auth = AuthSettings(enabled=True, keys_db=str(db))
    with LiveServer(build_app(settings)) as server:
        yield server, ApiKeyStore(db)


@pytest.mark.parametrize("path", ["/dashboard", "/dashboard/stats", "/dashboard/events"])
def test_dashboard_needs_a_key_with_the_dashboard_scope(keyed: tuple[LiveServer, ApiKeyStore], path: str) -> None:
    server, store = keyed
    _, plain = store.create("acme")
    _, viewer = store.create("acme", scopes=["dashboard"])
    _, admin = store.create("ops", scopes=["admin"])
    missing = httpx.get(server.url + path)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "missing_api_key"
    wrong = httpx.get(server.url + path, headers={"authorization": "Bearer bk-nope-nope"})
    assert wrong.status_code == 401
    denied = httpx.get(server.url + path, headers={"authorization": f"Bearer {plain}"})
    assert denied.status_code == 403 and denied.json()["error"]["type"] == "permission_error"
    for secret in (viewer, admin):
        with httpx.stream("GET", server.url + path, headers={"authorization": f"Bearer {secret}"}, timeout=5) as ok:
            assert ok.status_code == 200


def test_a_browser_without_a_session_gets_the_sign_in_page(keyed: tuple[LiveServer, ApiKeyStore]) -> None:
    server, _ = keyed
    page = httpx.get(f"{server.url}/dashboard", headers={"accept": "text/html"})
    assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
    assert 'id="signin"' in page.text and "/dashboard/session" in page.text


def test_a_session_cookie_stands_for_the_key_until_it_is_revoked(keyed: tuple[LiveServer, ApiKeyStore]) -> None:
    server, store = keyed
    key, secret = store.create("acme", scopes=["dashboard"])
    _, plain = store.create("acme")
    assert httpx.post(f"{server.url}/dashboard/session", headers={"authorization": f"Bearer {plain}"}).status_code == 403
    opened = httpx.post(f"{server.url}/dashboard/session", headers={"authorization": f"Bearer {secret}"})
    assert opened.status_code == 204
    cookie = opened.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and "path=/dashboard" in cookie.lower()
    # The key itself never leaves: neither whole nor its random part ("bk-<key id>-<random>"; the
    # random part may hold "-" itself, so split off the prefix, not the last segment).
    assert secret not in cookie and secret.split("-", 2)[2] not in cookie
    value = opened.cookies["blink_dashboard"]
    assert httpx.get(f"{server.url}/dashboard/stats", cookies={"blink_dashboard": value}).status_code == 200
    forged = value[:-4] + ("0000" if not value.endswith("0000") else "1111")
    assert httpx.get(f"{server.url}/dashboard/stats", cookies={"blink_dashboard": forged}).status_code == 401
    # Expiries int() refuses (a superscript digit, 5,000 digits) are unsigned cookies too, not 500s.
    for expires in ("\u00b2".encode("latin-1"), b"1" * 5000):
        hostile = {b"cookie": b"blink_dashboard=" + key.key_id.encode() + b"." + expires + b".00"}
        assert httpx.get(f"{server.url}/dashboard/stats", headers=hostile).status_code == 401
    store.revoke(key.key_id)
    assert httpx.get(f"{server.url}/dashboard/stats", cookies={"blink_dashboard": value}).status_code == 401


def test_signing_in_and_watching_in_chromium(keyed: tuple[LiveServer, ApiKeyStore]) -> None:
    """The sign-in form trades the key for a cookie; the page's EventSource then streams with it."""
    from playwright.sync_api import sync_playwright

    server, store = keyed
    _, secret = store.create("acme", scopes=["dashboard"])
    chromium = require("chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=_ARGS)
        try:
            page = browser.new_page()
            requested: list[str] = []
            page.on("request", lambda r: requested.append(r.url))
            page.goto(f"{server.url}/dashboard")
            page.fill("#key", secret)
            page.click("button[type=submit]")
            page.wait_for_function("window.blinkDashboard && window.blinkDashboard.updates >= 2", timeout=20_000)
            assert page.inner_text("#conn") == "live"
        finally:
            browser.close()
    assert not any(secret in url for url in requested)  # the key never went into a URL
