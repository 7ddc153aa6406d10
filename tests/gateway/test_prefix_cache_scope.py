"""The embedded engine's prefix cache is scoped by tenant when API keys are on (and by vLLM's
``cache_salt`` within it): a hit shows in ``usage.prompt_tokens_details.cached_tokens`` and in the
time to first token, so a shared cache would tell one tenant which prompts another sent. Checked
over HTTP with the real ``openai`` client against a tiny embedded model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from live_server import LiveServer

from blink.config.gateway import AuthSettings
from blink.config.models import EmbeddedModel
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.serve import build_app

# Several full 16-token blocks of shared prefix; each request then asks its own question, so the
# response cache never answers and the engine's prefix cache is what is measured.
SECRET = "You are the assistant of ACME's merger team. The target is Globex, offer 41 dollars a share. " * 3


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    db = tmp_path_factory.mktemp("keys") / "keys.db"
    store = ApiKeyStore(db)
    return {"db": str(db), "acme": store.create("acme")[1], "acme2": store.create("acme")[1],
            "globex": store.create("globex")[1]}


@pytest.fixture(scope="module")
def app(tiny_qwen2: Path, keys: dict[str, str]) -> Iterator[tuple[Any, str]]:
    settings = Settings(models=[EmbeddedModel(name="tiny", kind="embedded", model=str(tiny_qwen2), dtype="float32",
                                              threads=1)],
                        auth=AuthSettings(enabled=True, keys_db=keys["db"]))
    application = build_app(settings)
    with LiveServer(application) as server:
        yield application, server.url


def _cached(url: str, key: str, question: str, **extra: Any) -> int:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    done = client.chat.completions.create(
        model="tiny", max_tokens=1, extra_body=extra or None,
        messages=[{"role": "system", "content": SECRET}, {"role": "user", "content": question}])
    assert done.usage is not None and done.usage.prompt_tokens_details is not None
    return done.usage.prompt_tokens_details.cached_tokens or 0


def test_another_tenant_gets_no_hit_on_a_tenants_prompt(app: tuple[Any, str], keys: dict[str, str]) -> None:
    url = app[1]
    _cached(url, keys["acme"], "Draft the letter.")
    assert _cached(url, keys["acme2"], "Draft the memo.") >= 48  # the same tenant shares, whatever its key
    assert _cached(url, keys["globex"], "Is the offer 41?") == 0  # the probe learns nothing
    assert _cached(url, keys["globex"], "Is the offer 42?") >= 48  # its own prefix is cached for it


def test_cache_salt_scopes_within_a_tenant(app: tuple[Any, str], keys: dict[str, str]) -> None:
    url = app[1]
    _cached(url, keys["acme"], "Warm it.")
    assert _cached(url, keys["acme"], "First user.", cache_salt="user-1") == 0
    assert _cached(url, keys["acme"], "First user again.", cache_salt="user-1") >= 48
    assert _cached(url, keys["acme2"], "Second user.", cache_salt="user-2") == 0
    with pytest.raises(openai.BadRequestError) as err:
        _cached(url, keys["acme"], "x", cache_salt="")
    assert err.value.body["param"] == "cache_salt"  # type: ignore[index]


def test_shared_scope_shares_across_tenants(app: tuple[Any, str], keys: dict[str, str]) -> None:
    application, url = app
    pipeline = application.state.pipeline
    pipeline.prefix_cache_scope = "shared"  # the setting, as serve.py passes it, on the live pipeline
    try:
        _cached(url, keys["acme"], "Shared warm-up.")
        assert _cached(url, keys["globex"], "Shared probe.") >= 48
    finally:
        pipeline.prefix_cache_scope = "tenant"
