"""Structured outputs through ``blink serve`` with real third-party clients: LangChain's
``with_structured_output`` (all three methods, pydantic and JSON-schema/TypedDict schemas) and
LlamaIndex's ``OpenAILike.as_structured_llm`` / ``structured_predict``.

Tiny random weights, so the assertions are about form: constrained output is valid JSON that
validates against the client's schema, and a forced tool is called. The schemas bound their
strings (``maxLength``) and numbers so a random model finishes inside ``max_tokens``. One server
for the module; each call is a short generation.

LlamaIndex (``llama-index-llms-openai-like``) is not in the ``test`` extra: its ``llama-index-llms-openai``
requires ``openai<3`` and would downgrade the SDK every other test uses. Its tests run where it is
installed (a side environment), and are skipped elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from langchain_openai import ChatOpenAI
from live_server import LiveServer
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.serve import build_registry

MODEL = "tiny-clients"
ASK = "Describe a city."


class City(BaseModel):
    """A city."""

    name: str = Field(min_length=1, max_length=8)
    population: int = Field(ge=0, le=999)
    capital: bool
    climate: Literal["dry", "wet", "mild"]


class Town(TypedDict):
    """A town."""

    name: Annotated[str, ..., "its name"]
    big: Annotated[bool, ..., "whether it is big"]


TOWN_SCHEMA: dict[str, Any] = {
    "title": "Town", "description": "A town.", "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "rank": {"type": "integer", "minimum": 1, "maximum": 9},
                   "tags": {"type": "array", "items": {"enum": ["old", "new"]}, "maxItems": 2}},
    "required": ["name", "rank", "tags"],
}


@pytest.fixture(scope="module")
def url(tiny_qwen2: Path) -> Iterator[str]:
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=1024)],
    )
    with LiveServer(create_app(build_registry(settings), settings.server)) as server:
        yield server.url


@pytest.fixture(scope="module")
def chat(url: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120,  # type: ignore[arg-type]
                      temperature=1.0, seed=3, max_tokens=160)  # type: ignore[call-arg]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_pydantic_schema(chat: ChatOpenAI, method: str) -> None:
    out = chat.with_structured_output(City, method=method, include_raw=True).invoke(ASK)  # type: ignore[arg-type]
    assert out["parsing_error"] is None
    assert isinstance(out["parsed"], City)
    raw = out["raw"]
    if method == "function_calling":  # the forced tool was called, with arguments the schema allows
        assert [c["name"] for c in raw.tool_calls] == ["City"]
        City.model_validate(raw.tool_calls[0]["args"])
    else:
        City.model_validate_json(raw.content)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_typeddict_and_json_schema_dicts(chat: ChatOpenAI, url: str, method: str) -> None:
    # A TypedDict cannot bound its strings: like json_mode below, a longer budget (the context is 1,024
    # tokens, the tool prompt ~440), so a random model's name string ends whatever its seed draws.
    long_chat = ChatOpenAI(model=MODEL, base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120,  # type: ignore[arg-type]
                           temperature=1.0, seed=3, max_tokens=560)  # type: ignore[call-arg]
    town = long_chat.with_structured_output(Town, method=method).invoke(ASK)  # type: ignore[arg-type]
    assert isinstance(town, dict) and set(town) == {"name", "big"}
    assert isinstance(town["name"], str) and isinstance(town["big"], bool)
    out = chat.with_structured_output(TOWN_SCHEMA, method=method).invoke(ASK)  # type: ignore[arg-type]
    jsonschema.validate(out, TOWN_SCHEMA)


def test_langchain_json_mode(url: str) -> None:
    """json_mode sends ``response_format: json_object``: any JSON object, so the raw output is
    one; a dict schema needs nothing more of it. Its strings are unbounded, so a random model
    gets a longer budget (a length stop is an error in the client, not a parsed object)."""
    chat = ChatOpenAI(model=MODEL, base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120,  # type: ignore[arg-type]
                      temperature=1.0, seed=3, max_tokens=600)  # type: ignore[call-arg]
    out = chat.with_structured_output(City, method="json_mode", include_raw=True).invoke(ASK)
    doc = json.loads(out["raw"].content)
    assert isinstance(doc, dict)
    if out["parsing_error"] is None:  # random weights rarely hit City's fields; when they do, it parses
        assert isinstance(out["parsed"], City)
    free = chat.with_structured_output(TOWN_SCHEMA, method="json_mode").invoke(ASK)
    assert isinstance(free, dict)


def test_langchain_json_schema_streams(chat: ChatOpenAI) -> None:
    chunks = list(chat.with_structured_output(City, method="json_schema").stream(ASK))
    assert chunks and isinstance(chunks[-1], City)


def _llamaindex(url: str) -> Any:
    # Installed by .ci/system-deps.sh (without its paper pin on openai<3): missing is an error, not a skip.
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(model=MODEL, api_base=f"{url}/v1", api_key="unused", is_chat_model=True,
                      is_function_calling_model=True, max_tokens=160, temperature=1.0,
                      context_window=1024, max_retries=0, timeout=120)


def test_llamaindex_as_structured_llm(url: str) -> None:
    llm = _llamaindex(url)
    from llama_index.core.llms import ChatMessage

    response = llm.as_structured_llm(City).chat([ChatMessage(role="user", content=ASK)])
    assert isinstance(response.raw, City)
    City.model_validate_json(response.message.content)


def test_llamaindex_structured_predict(url: str) -> None:
    llm = _llamaindex(url)
    from llama_index.core.prompts import PromptTemplate

    city = llm.structured_predict(City, PromptTemplate("Describe {place}."), place="a city")
    assert isinstance(city, City)


def test_langchain_stream_usage_async_and_batch(url: str) -> None:
    """``stream_usage=True`` reads the usage chunk (``stream_options.include_usage``); ``abatch`` and
    ``astream`` go through the async client; usage adds up the same way in each."""
    import asyncio

    chat = ChatOpenAI(model=MODEL, base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60,  # type: ignore[arg-type]
                      temperature=0, max_tokens=4, stream_usage=True)  # type: ignore[call-arg]
    chunks = list(chat.stream(ASK))
    streamed = chunks[0]
    for c in chunks[1:]:
        streamed = streamed + c  # type: ignore[assignment]
    whole = chat.invoke(ASK)
    assert streamed.content == whole.content
    assert streamed.usage_metadata is not None and whole.usage_metadata is not None
    assert streamed.usage_metadata["output_tokens"] == 4 == whole.usage_metadata["output_tokens"]
    assert streamed.usage_metadata["input_tokens"] == whole.usage_metadata["input_tokens"] > 0

    async def run() -> tuple[list[Any], list[Any]]:
        batch = await chat.abatch([ASK, "Describe a town."])
        return batch, [c async for c in chat.astream(ASK)]

    batch, achunks = asyncio.run(run())
    assert batch[0].content == whole.content and len(batch) == 2
    assert "".join(str(c.content) for c in achunks) == whole.content
    assert any(c.usage_metadata for c in achunks)
