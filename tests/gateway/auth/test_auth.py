"""API keys end to end: 401 without/with a wrong/revoked key, 403 for another model, hashed storage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.gateway import AuthSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.serve import build_app

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def keys_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("keys") / "keys.db"


@pytest.fixture(scope="module")
def secured(upstream: FakeUpstream, keys_db: Path) -> Iterator[LiveServer]:
    settings = Settings(
        server=ServerSettings(),
        models=[
            OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url),
            OpenAIHTTPModel(name="other", kind="openai_http", base_url=upstream.base_url),
        ],
        auth=AuthSettings(enabled=True, keys_db=str(keys_db)),
    )
    with LiveServer(build_app(settings)) as server:
        yield server


def _client(server: LiveServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def test_valid_key_is_served(secured: LiveServer, keys_db: Path) -> None:
    _, secret = ApiKeyStore(keys_db).create("acme")
    resp = _client(secured, secret).chat.completions.create(model="fake", messages=MSGS)  # type: ignore[arg-type]
    assert resp.choices[0].message.content
    # The other accepted header form.
    r = httpx.post(f"{secured.url}/v1/chat/completions", json={"model": "fake", "messages": MSGS},
                   headers={"x-api-key": secret})
    assert r.status_code == 200


def test_missing_key_is_401(secured: LiveServer) -> None:
    r = httpx.post(f"{secured.url}/v1/chat/completions", json={"model": "fake", "messages": MSGS})
    assert r.status_code == 401
    err = r.json()["error"]
    assert err["type"] == "authentication_error" and err["code"] == "missing_api_key"


def test_wrong_key_is_401_with_the_openai_client(secured: LiveServer) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        _client(secured, "bk-nope-nope").chat.completions.create(model="fake", messages=MSGS)  # type: ignore[arg-type]
    assert info.value.code == "invalid_api_key"


def test_revoked_key_is_401(secured: LiveServer, keys_db: Path) -> None:
    store = ApiKeyStore(keys_db)
    key, secret = store.create("acme")
    assert _client(secured, secret).models.list().data
    assert store.revoke(key.key_id)
    with pytest.raises(openai.AuthenticationError):
        _client(secured, secret).models.list()


def test_key_for_another_model_is_403(secured: LiveServer, keys_db: Path) -> None:
    _, secret = ApiKeyStore(keys_db).create("acme", models=["other"])
    with pytest.raises(openai.PermissionDeniedError) as info:
        _client(secured, secret).chat.completions.create(model="fake", messages=MSGS)  # type: ignore[arg-type]
    assert info.value.code == "model_not_allowed"
    assert _client(secured, secret).chat.completions.create(model="other", messages=MSGS).choices  # type: ignore[arg-type]


def test_health_stays_open(secured: LiveServer) -> None:
    assert httpx.get(f"{secured.url}/health").status_code == 200


def test_keys_are_stored_hashed(keys_db: Path) -> None:
    store = ApiKeyStore(keys_db)
    key, secret = store.create("t")
    assert secret.startswith(f"bk-{key.key_id}-")
    assert len(key.key_id) == 16 and int(key.key_id, 16) >= 0  # 64 random bits: the id is the primary key
    assert secret.encode() not in keys_db.read_bytes()
    assert store.lookup(secret) is not None and store.lookup(secret + "x") is None


def test_remembered_keys_follow_writes_from_any_connection(tmp_path: Path) -> None:
    """A server's store remembers live keys; a revocation by another connection (the CLI) or by
    itself, and a new key, are seen on the very next lookup."""
    server, cli = ApiKeyStore(tmp_path / "k.db"), ApiKeyStore(tmp_path / "k.db")
    key, secret = cli.create("acme")
    first = server.lookup(secret)
    assert first is not None and first.tenant == "acme"
    assert server.lookup(secret) is first  # remembered: no second SELECT
    assert cli.revoke(key.key_id)
    assert server.lookup(secret) is None
    other, other_secret = cli.create("beta")
    assert (found := server.lookup(other_secret)) is not None and found.key_id == other.key_id
    assert server.revoke(other.key_id)
    assert server.lookup(other_secret) is None


def test_scopes_and_sequence_quota_round_trip(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path / "k.db")
    key, secret = store.create("acme", scopes=["dashboard", "priority:voice"], max_sequences=8)
    found = store.lookup(secret)
    assert found is not None and found.scopes == ["dashboard", "priority:voice"] and found.max_sequences == 8
    assert found.has_scope("dashboard") and not found.has_scope("admin")
    assert found.may_use_priority("voice") and not found.may_use_priority("interactive")
    admin, _ = store.create("ops", scopes=["admin"])
    assert admin.has_scope("dashboard") and admin.may_use_priority("voice")  # admin implies every scope
    plain, _ = store.create("acme")
    assert plain.scopes == [] and not plain.has_scope("dashboard")


def test_unknown_scope_is_refused(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path / "k.db")
    # A lane x-blink-priority does not know is a typo too: it granted nothing, silently.
    for bad in (["root"], ["priority:"], ["a,b"], ["priority:vocie"], ["priority:voice,batch"]):
        with pytest.raises(ValueError):
            store.create("acme", scopes=bad)
    with pytest.raises(ValueError):
        store.create("acme", max_sequences=-1)
    assert store.list() == []
    lanes = ["priority:voice", "priority:interactive", "priority:normal", "priority:batch", "priority:idle"]
    assert store.create("acme", scopes=lanes)[0].scopes == lanes


def test_keys_are_found_by_id_while_live(tmp_path: Path) -> None:
    """Queued work (batch lines) runs under the key's current record: a revoked key is gone."""
    store = ApiKeyStore(tmp_path / "k.db")
    key, _ = store.create("acme", models=["m"])
    found = store.by_id(key.key_id)
    assert found is not None and found.tenant == "acme" and found.models == ["m"]
    assert store.by_id("nope") is None
    store.revoke(key.key_id)
    assert store.by_id(key.key_id) is None


def test_a_key_file_from_before_scopes_gains_the_columns(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE api_keys (key_id TEXT PRIMARY KEY, key_hash TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL, "
               "models TEXT NOT NULL, requests_per_minute INTEGER NOT NULL, tokens_per_minute INTEGER NOT NULL, "
               "created_at REAL NOT NULL, revoked_at REAL)")
    from blink.gateway.auth.keys import hash_key

    db.execute("INSERT INTO api_keys VALUES ('abcd', ?, 'old', '', 0, 0, 1.0, NULL)", (hash_key("bk-abcd-s"),))
    db.commit()
    db.close()
    found = ApiKeyStore(path).lookup("bk-abcd-s")
    assert found is not None and found.tenant == "old" and found.scopes == [] and found.max_sequences == 0
