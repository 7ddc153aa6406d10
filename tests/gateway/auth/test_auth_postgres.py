"""API keys in PostgreSQL: created with the CLI, checked by the gateway with the real openai
client, revoked, and the defined behaviour while the database is down (seen keys keep working,
an unknown key gets a typed 503, never a 500 or a hang)."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
from live_server import LiveServer
from servers import PostgresServer
from typer.testing import CliRunner
from upstream_server import FakeUpstream

from blink.cli.main import app as cli_app
from blink.config.gateway import AuthSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.auth.postgres import PostgresKeyStore
from blink.protocol.errors import BackendUnavailableError
from blink.serve import build_app

MSGS = [{"role": "user", "content": "hi"}]


def _chat(url: str, key: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "fake", "messages": MSGS},
                      headers={"authorization": f"Bearer {key}"}, timeout=10)


def test_keys_in_postgres_end_to_end(upstream: FakeUpstream) -> None:
    with PostgresServer() as pg:
        out = CliRunner().invoke(cli_app, ["keys", "create", "--tenant", "acme", "--db", pg.dsn])
        assert out.exit_code == 0, out.output
        secret = out.stdout.strip().splitlines()[0]
        settings = Settings(
            server=ServerSettings(),
            models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url)],
            auth=AuthSettings(enabled=True, postgres_dsn=pg.dsn),
        )
        with LiveServer(build_app(settings)) as server:
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0)
            assert client.chat.completions.create(model="fake", messages=MSGS).choices[0].message.content  # type: ignore[arg-type]
            assert _chat(server.url, "bk-nope-wrong").status_code == 401
            listed = CliRunner().invoke(cli_app, ["keys", "list", "--db", pg.dsn])
            assert "acme" in listed.stdout and "active" in listed.stdout

            # A revocation reaches a store with no read cache at once (the gateway's: within cache_s).
            direct = PostgresKeyStore(pg.dsn, cache_s=0)
            key_id = secret.split("-")[1]
            assert CliRunner().invoke(cli_app, ["keys", "revoke", key_id, "--db", pg.dsn]).exit_code == 0

            async def check_revoked() -> None:
                assert await direct.alookup(secret) is None
                await direct.aclose()

            asyncio.run(check_revoked())
        # PostgreSQL is stopped when the block ends.


async def test_database_down_keeps_seen_keys_and_answers_503_for_others() -> None:
    with PostgresServer() as pg:
        # A lookup budget shorter than opening the pool: the first, cold lookup has its own.
        store = PostgresKeyStore(pg.dsn, cache_s=0.0, timeout_s=0.005)
        try:
            _, secret = store.create("acme")
            key = await store.alookup(secret)
            assert key is not None and key.tenant == "acme"
        except BaseException:
            await store.aclose()  # its pool would retry a stopped server until the loop closes
            raise
    # The server is gone. A key verified before is still accepted; an unknown one cannot be
    # checked, which is a typed 503 within the timeout.
    try:
        t0 = time.monotonic()
        again = await store.alookup(secret)
        assert again is not None and again.key_id == key.key_id
        with pytest.raises(BackendUnavailableError) as info:
            await store.alookup("bk-0000-unknown")
        assert info.value.status == 503 and info.value.code == "key_store_unavailable"
        assert time.monotonic() - t0 < 2.0
    finally:
        await store.aclose()
