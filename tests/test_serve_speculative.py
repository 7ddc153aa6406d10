"""`speculative` and `quantization` through the whole server: real sockets, the openai client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from live_server import LiveServer

from blink.backends.embedded import EmbeddedBackend
from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.serve import build_registry

MODEL = "tiny-spec"


@pytest.fixture(scope="module")
def served(tiny_llama: Path) -> Iterator[tuple[str, EmbeddedBackend]]:
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_llama), dtype="float32", threads=1,
                              max_model_len=256, speculative="ngram", num_speculative_tokens=4,
                              quantization="int8")],
    )
    registry = build_registry(settings)
    backend = registry.resolve(MODEL)
    with LiveServer(create_app(registry, settings.server)) as server:
        yield server.url, backend  # type: ignore[misc]


def test_speculation_on_and_off_stream_the_same_greedy_text(served: tuple[str, EmbeddedBackend]) -> None:
    url, backend = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "def add(a, b): return a + b\ndef add(a, b): return a + b\n"}]

    def ask(**extra: object) -> str:
        chunks = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=48, temperature=0,  # type: ignore[arg-type]
                                                stream=True, extra_body=extra)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    off = ask(speculative=False)
    on = ask()
    assert on == off and on
    deadline = time.monotonic() + 5  # engine stats reach the frontend with the next step's report
    while time.monotonic() < deadline and not backend.load().spec_acceptance_rate:
        time.sleep(0.05)
    assert backend.load().spec_tokens_per_step is not None
