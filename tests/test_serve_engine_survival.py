"""No request can kill the engine (issue #20): generated requests against `blink serve`'s embedded engine.

A real gateway (uvicorn on 127.0.0.1) in front of a real engine-core process on the tiny model.
Every generated body is either refused with a 4xx OpenAI error (no traceback, no path) or served
to completion, and the engine still serves a plain request afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import LiveServer

from blink.backends.embedded import EmbeddedBackend
from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.serve import build_registry

MODEL = "tiny"
EXTREME_INTS = [2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -1, 0]
EXTREME_FLOATS = [0.0, -0.0, 1e-9, 1e-300, 2.0, 2.0000001, 1e308, -1e308, float("nan"), float("inf")]


@pytest.fixture(scope="module")
def served(tiny_qwen2: Path) -> Iterator[tuple[str, EmbeddedBackend]]:
    settings_ = Settings(
        server=ServerSettings(max_concurrent_streams=8, max_body_bytes=4 << 20),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=256, max_num_seqs=8)],
    )
    registry = build_registry(settings_)
    backend = registry.resolve(MODEL)
    with LiveServer(create_app(registry, settings_.server)) as server:
        yield server.url, backend  # type: ignore[misc]


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(lo, hi), st.sampled_from(EXTREME_INTS))


def _floats(lo: float, hi: float) -> st.SearchStrategy[Any]:
    wrong = st.one_of(st.none(), st.booleans(), st.text(max_size=2))
    return st.one_of(st.floats(lo, hi), st.sampled_from(EXTREME_FLOATS), st.floats(), wrong)


_STOP = st.one_of(
    st.none(), st.text(max_size=4), st.lists(st.text(max_size=4), max_size=20),
    st.just(["x" * 1025]), st.just([]), st.integers(),
)
# max_tokens is always sent, and small when valid, so a run stays short; everything else may be
# missing, at a limit, past it, extreme or of the wrong type.
_OPTIONAL = {
    "n": _ints(1, 3),
    "temperature": _floats(0.0, 2.0),
    "top_p": _floats(0.0, 1.0),
    "top_k": _ints(-2, 600),
    "min_p": _floats(0.0, 1.0),
    "seed": _ints(-5, 5),
    "presence_penalty": _floats(-2.0, 2.0),
    "frequency_penalty": _floats(-2.0, 2.0),
    "repetition_penalty": _floats(0.0, 2.0),
    "min_tokens": _ints(0, 3),
    "stop": _STOP,
    "stop_token_ids": st.one_of(st.lists(_ints(0, 600), max_size=3), st.just(list(range(300)))),
    "logprobs": st.booleans(),
    "top_logprobs": _ints(0, 21),
    "ignore_eos": st.booleans(),
    "stream": st.booleans(),
    "logit_bias": st.one_of(st.just({}), st.dictionaries(st.sampled_from(["1", "50", "x"]), _floats(-100, 100),
                                                         max_size=2)),
}
BODIES = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": st.just([{"role": "user", "content": "def add(a, b):"}]),
     "max_tokens": _ints(1, 4)},
    optional=_OPTIONAL,  # type: ignore[arg-type]
)


def _assert_clean_error(resp: httpx.Response) -> None:
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
    err = resp.json()["error"]
    assert err["type"] and err["message"]
    assert "Traceback" not in err["message"] and ".py" not in err["message"], err


def _assert_completed(resp: httpx.Response, body: dict[str, Any]) -> None:
    n = body.get("n", 1)
    if body.get("stream"):
        finished: dict[int, str] = {}
        lines = [ln[6:] for ln in resp.text.splitlines() if ln.startswith("data: ")]
        assert lines and lines[-1] == "[DONE]", resp.text[-300:]
        for line in lines[:-1]:
            event = json.loads(line)
            assert "error" not in event, event
            for choice in event["choices"]:
                if choice.get("finish_reason"):
                    finished[choice["index"]] = choice["finish_reason"]
    else:
        finished = {c["index"]: c["finish_reason"] for c in resp.json()["choices"]}
    assert sorted(finished) == list(range(n)), resp.text[-300:]
    assert set(finished.values()) <= {"stop", "length"}


def test_generated_requests_never_kill_the_engine(served: tuple[str, EmbeddedBackend]) -> None:
    url, backend = served
    served_count = [0, 0]

    with httpx.Client(base_url=url, timeout=60) as http:

        @settings(max_examples=150, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(BODIES)
        def one(body: dict[str, Any]) -> None:
            # json.dumps writes NaN/Infinity as JSON does not allow: the gateway must refuse those too.
            resp = http.post("/v1/chat/completions", content=json.dumps(body),
                             headers={"content-type": "application/json"})
            if resp.status_code == 200:
                _assert_completed(resp, body)
                served_count[0] += 1
            else:
                _assert_clean_error(resp)
                served_count[1] += 1

        one()
        assert backend.engine.is_alive()
        after = http.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3,
            "temperature": 0, "ignore_eos": True})
        assert after.status_code == 200 and after.json()["choices"][0]["finish_reason"] == "length"
    assert served_count[0] > 10 and served_count[1] > 10  # both sides of the boundary were exercised


@pytest.mark.parametrize("top_k", [2**63, 2**63 + 1, 2**64 - 1, 2**31, 513])
@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_top_k_past_the_vocabulary_is_a_400_and_the_engine_lives(
    served: tuple[str, EmbeddedBackend], top_k: int, endpoint: str
) -> None:
    """The exact request that killed the engine for good: top_k in [2**63, 2**64) with temperature > 0."""
    url, backend = served
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 4, "temperature": 0.8, "top_k": top_k}
    body |= {"messages": [{"role": "user", "content": "hi"}]} if "chat" in endpoint else {"prompt": "hi"}
    for stream in (False, True):
        resp = httpx.post(f"{url}{endpoint}", json=body | {"stream": stream}, timeout=60)
        assert resp.status_code == 400, resp.text
        err = resp.json()["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == "top_k"
    ok = httpx.post(f"{url}{endpoint}", json=body | {"top_k": 40}, timeout=60)
    assert ok.status_code == 200, ok.text
    assert backend.engine.is_alive()


async def test_mebibyte_prompts_over_the_context_are_400s_while_the_server_answers(
    served: tuple[str, EmbeddedBackend],
) -> None:
    """Issue #20 item 8: oversize prompts are refused by size, and never hold the event loop."""
    url, _ = served
    big = "def add(a, b):\n    return a + b\n" * (1 << 15)  # ~1 MiB, far over 256 tokens
    chat = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": big}]}
    small = {"model": MODEL, "max_tokens": 2, "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        bigs = [asyncio.create_task(http.post("/v1/chat/completions", json=chat)) for _ in range(4)]
        health = [await http.get("/health") for _ in range(3)]
        served_small = await http.post("/v1/chat/completions", json=small)
        refused = await asyncio.gather(*bigs)
    assert all(r.status_code == 200 for r in health) and served_small.status_code == 200
    for r in refused:
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("prompt", [[2**64], [2**63], [-1], [512], [[1, 2], [512]], "", [], [[]], [[1], []]])
def test_token_prompts_outside_the_vocabulary_are_400s(served: tuple[str, EmbeddedBackend], prompt: Any) -> None:
    url, backend = served
    resp = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 2}, timeout=60)
    _assert_clean_error(resp)
    assert resp.status_code == 400 and backend.engine.is_alive()
