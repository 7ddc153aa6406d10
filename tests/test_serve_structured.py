"""Structured outputs through the whole server: real sockets, the real openai client, an engine
with n-gram speculation on (each test also runs a request with it off). Tiny random weights, so
the assertions are about form: parsed objects, valid JSON, choices, regex matches, clean 400s."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from live_server import LiveServer
from pydantic import BaseModel, Field

from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.protocol.errors import InvalidRequestError
from blink.request_limits import SAMPLING_LIMITS
from blink.serve import build_registry

MODEL = "tiny-structured"
MESSAGES = [{"role": "user", "content": "Describe a user as JSON."}]


class User(BaseModel):
    name: str = Field(max_length=6)
    admin: bool
    level: Literal["low", "mid", "high"]


@pytest.fixture(scope="module")
def url(tiny_llama: Path) -> Iterator[str]:
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_llama), dtype="float32", threads=1,
                              max_model_len=512, speculative="ngram", num_speculative_tokens=4)],
    )
    with LiveServer(create_app(build_registry(settings), settings.server)) as server:
        yield server.url


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("speculative", [True, False])
def test_parse_returns_the_pydantic_object(client: openai.OpenAI, speculative: bool) -> None:
    for temperature in (0.0, 1.0):
        done = client.chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=User,  # type: ignore[arg-type]
                                             max_tokens=200, temperature=temperature, seed=7,
                                             extra_body={"speculative": speculative})
        parsed = done.choices[0].message.parsed
        assert isinstance(parsed, User)
        assert done.choices[0].finish_reason == "stop"


def test_streamed_schema_output_is_valid(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=MESSAGES, response_format=User,  # type: ignore[arg-type]
                                        max_tokens=200, temperature=0.8, seed=1) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(deltas) > 1
    assert isinstance(final.choices[0].message.parsed, User)
    assert "".join(deltas) == final.choices[0].message.content


def test_non_strict_json_schema_and_n_choices(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
              "required": ["ok", "n"]}
    done = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=100, temperature=1.0, n=3,  # type: ignore[arg-type]
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": False}})
    for choice in done.choices:
        jsonschema.validate(json.loads(choice.message.content or ""), schema)


def test_vllm_fields_choice_regex_grammar(client: openai.OpenAI) -> None:
    def ask(**extra: object) -> str:
        done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40,  # type: ignore[arg-type]
                                              temperature=1.0, extra_body=extra)
        return done.choices[0].message.content or ""

    assert ask(guided_choice=["red", "green", "blue"]) in {"red", "green", "blue"}
    assert ask(structured_outputs={"choice": ["up", "down"]}) in {"up", "down"}
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", ask(guided_regex=r"[0-9]{3}-[a-z]{2}"))
    for backend in ("xgrammar", "guidance", "llguidance", "auto"):  # each grammar library, by request
        assert re.fullmatch(r"ab+c?", ask(structured_outputs={"regex": "ab+c?"}, guided_decoding_backend=backend))
    assert ask(guided_grammar='root ::= "x" ("y" | "z")') in {"xy", "xz"}
    schema = {"type": "object", "properties": {"v": {"type": "boolean"}}, "required": ["v"]}
    jsonschema.validate(json.loads(ask(guided_json=schema)), schema)
    jsonschema.validate(json.loads(ask(structured_outputs={"json": json.dumps(schema)})), schema)


def test_completions_endpoint_takes_guided_json(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"]}
    done = client.completions.create(model=MODEL, prompt="JSON:", max_tokens=40, temperature=0,
                                     extra_body={"guided_json": schema})
    jsonschema.validate(json.loads(done.choices[0].text), schema)


async def test_options_structured_alone_constrains_the_engine(tiny_llama: Path) -> None:
    """What forced tool calls rely on: the embedded backend honours ``SamplingOptions.structured``
    with no request field behind it."""
    from blink.backends.base import GenerationRequest, SamplingOptions, StructuredOutput

    registry = build_registry(Settings(models=[EmbeddedModel(name="t", kind="embedded", model=str(tiny_llama),
                                                             dtype="float32", threads=1, max_model_len=256)]))
    backend = registry.resolve("t")
    await backend.start()
    try:
        opts = SamplingOptions(max_tokens=40, temperature=1.0,
                               structured=StructuredOutput("choice", json.dumps(["one", "two"]), "tools"))
        req = GenerationRequest(request_id="x", model="t", kind="chat", options=opts, messages=MESSAGES)
        assert "".join([d.text async for d in backend.stream(req)]) in {"one", "two"}
        bad = SamplingOptions(max_tokens=4, structured=StructuredOutput("regex", "((", "tools"))
        with pytest.raises(InvalidRequestError) as info:
            _ = [d async for d in backend.stream(GenerationRequest(request_id="y", model="t", kind="chat",
                                                                    options=bad, messages=MESSAGES))]
        assert info.value.param == "tools"
    finally:
        await backend.aclose()


BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"guided_regex": "(("}, "guided_regex"),
    ({"guided_grammar": 'start ::= "a"'}, "guided_grammar"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
    ({"guided_regex": "a", "guided_decoding_backend": "outlines"}, "guided_decoding_backend"),
    ({"guided_regex": "a", "min_tokens": 2}, "min_tokens"),
    # Specs that compile but admit no output: they failed in the engine as a 500.
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}}},
     "response_format"),
    ({"guided_grammar": "root ::= root"}, "guided_grammar"),
    ({"guided_regex": "[^\\s\\S]"}, "guided_regex"),
]


@pytest.mark.parametrize(("extra", "param"), BAD)
def test_invalid_specs_are_400_naming_the_field(client: openai.OpenAI, extra: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, extra_body=extra)  # type: ignore[arg-type]
    error = info.value.body
    assert isinstance(error, dict) and error["param"] == param and error["type"] == "invalid_request_error"
    assert ".cc" not in error["message"] and "Traceback" not in error["message"]


def test_pathological_schemas_never_kill_the_engine(url: str, client: openai.OpenAI) -> None:
    huge_enum = {"enum": [f"v{i}" for i in range(3000)]}
    deep: dict[str, object] = {"type": "string"}
    for _ in range(SAMPLING_LIMITS.max_structured_depth):
        deep = {"type": "object", "properties": {"a": deep}, "required": ["a"]}
    too_long = {"enum": ["x" * 1000] * (SAMPLING_LIMITS.max_structured_spec_chars // 1000 + 1)}
    for schema in (huge_enum, deep, too_long):
        body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 30, "guided_json": schema}
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code in (200, 400), r.text
        if r.status_code == 200:
            text = r.json()["choices"][0]["message"]["content"]
            if r.json()["choices"][0]["finish_reason"] == "stop":
                jsonschema.validate(json.loads(text), schema)
        else:
            assert r.json()["error"]["param"] == "guided_json"
    # Still serving.
    done = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=5,  # type: ignore[arg-type]
                                          extra_body={"guided_choice": ["fine"]})
    assert done.choices[0].message.content == "fine"
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
