"""``/v1/responses`` on the embedded engine (tiny random model) with the real clients.

The ``openai`` SDK's ``responses.create`` / ``.stream`` / ``.parse`` and the OpenAI Agents SDK run
against ``build_app`` (what ``blink serve`` runs). Random weights never choose a tool, so calls are
forced (``tool_choice`` required / named): the grammar engine then makes the output a valid call,
which proves the translation reaches #21's forced-call path; ``text_format`` goes through the same
grammar engine. Short generations keep the file to seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import openai
import pytest
from live_server import LiveServer
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

from blink.config.models import EmbeddedModel
from blink.config.responses import ResponsesSettings
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.serve import build_app

pytest.importorskip("blink.engine.structured")

MODEL = "tiny"
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
# Enum and boolean arguments only: a random model under a grammar ends them in a few tokens.
FORECAST = {"type": "function", "name": "forecast", "parameters": {
    "type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                     "hourly": {"type": "boolean"}},
    "required": ["unit", "hourly"], "additionalProperties": False}}
# Long enough that one full KV block (16 tokens) of the first turn is shared by the next.
LONG = "Please remember these words for later: " + " ".join(f"word{i}" for i in range(40))


class Verdict(BaseModel):
    mood: Literal["happy", "sad"]
    ok: bool


@pytest.fixture(scope="module")
def url(tiny_qwen2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("serve-responses")
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=1024)],
        responses=ResponsesSettings(path=str(tmp / "responses.db")),
    )
    with LiveServer(build_app(settings)) as server:
        yield server.url


@pytest.fixture
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_three_turns_replay_and_reuse_the_prefix_cache(client: openai.OpenAI) -> None:
    one = client.responses.create(model=MODEL, input=LONG, max_output_tokens=4, temperature=0)
    assert one.status in ("completed", "incomplete") and one.output[0].type == "message"
    two = client.responses.create(model=MODEL, input="And now?", previous_response_id=one.id, max_output_tokens=4,
                                  temperature=0)
    three = client.responses.create(model=MODEL, input="Last one.", previous_response_id=two.id,
                                    max_output_tokens=4, temperature=0)
    assert two.usage is not None and three.usage is not None and one.usage is not None
    assert three.usage.input_tokens > two.usage.input_tokens > one.usage.input_tokens  # the history is replayed
    assert three.usage.input_tokens_details.cached_tokens > 0  # the earlier turns' KV blocks were reused
    assert client.responses.retrieve(three.id).output_text == three.output_text


def test_stream_matches_the_final_response(client: openai.OpenAI) -> None:
    # A random model rarely stops within 6 tokens: the last event is then ``response.incomplete`` (as OpenAI
    # sends it; the SDK's ``get_final_response`` knows only ``response.completed``), so read it from the events.
    with client.responses.stream(model=MODEL, input="Hello", max_output_tokens=6, temperature=0) as stream:
        events = list(stream)
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete")
    final = last.response  # type: ignore[union-attr]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == final.output_text and final.usage is not None and final.usage.output_tokens <= 6


def test_parse_with_a_pydantic_text_format_gives_valid_json(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(model=MODEL, input="How are you?", text_format=Verdict, max_output_tokens=60,
                                    temperature=1.0)
    assert isinstance(parsed.output_parsed, Verdict)
    Verdict.model_validate_json(parsed.output_text)


def test_forced_function_call_and_its_round_trip(client: openai.OpenAI) -> None:
    call = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=[FORECAST],  # type: ignore[list-item]
                                   tool_choice="required", parallel_tool_calls=False, max_output_tokens=200)
    Response.model_validate(call.model_dump(exclude_unset=True))  # the SDK builds objects unvalidated
    calls = [item for item in call.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "forecast"
    args = json.loads(calls[0].arguments)
    assert args["unit"] in ("celsius", "fahrenheit") and isinstance(args["hourly"], bool)
    answer = client.responses.create(model=MODEL, previous_response_id=call.id, max_output_tokens=4,
                                     input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                             "output": "12 degrees"}])
    assert answer.status in ("completed", "incomplete") and answer.output[0].type == "message"


def test_streamed_forced_call_events(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="Weather?", tools=[FORECAST],  # type: ignore[list-item]
                                 tool_choice={"type": "function", "name": "forecast"}, max_output_tokens=200) as s:
        events = list(s)
        final = s.get_final_response()
    for event in events:  # the SDK builds events unvalidated: check each against its type
        EVENTS.validate_python(event.model_dump(exclude_unset=True))
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert final.output[-1].type == "function_call"


def test_the_agents_sdk_runs_a_tool_agent_to_completion(url: str) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    seen: list[str] = []

    @agents.function_tool
    def forecast(unit: Literal["celsius", "fahrenheit"], hourly: bool) -> str:
        """The forecast for today."""
        seen.append(unit)
        return f"12 degrees {unit}"

    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="unused", max_retries=0))
    # The first turn must call the tool (random weights would not); the SDK then resets tool_choice to
    # auto, and the structured final answer (text.format from ``output_type``) is what makes a random
    # model stop: the grammar ends it.
    agent = agents.Agent(name="weather", instructions="Answer with the forecast.", tools=[forecast], model=model,
                         output_type=Verdict,
                         model_settings=agents.ModelSettings(tool_choice="required", max_tokens=120, temperature=0))
    result = agents.Runner.run_sync(agent, "Weather in Oslo?", max_turns=4)
    assert seen and seen[0] in ("celsius", "fahrenheit")  # the tool ran with the grammar-made arguments
    outputs = [i for i in result.new_items if i.type == "tool_call_output_item"]
    assert outputs and "12 degrees" in str(outputs[0].output)
    assert isinstance(result.final_output, Verdict)  # then the model answered, with the tool's result in context


def test_vllm_sampling_extras_guidellm_shape(client: openai.OpenAI) -> None:
    """guidellm's Responses request fixes the output length with vLLM's ``stop: null`` and ``ignore_eos``;
    ``stop`` strings are honoured (the output is cut), not accepted and dropped."""
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "Tell me a story."}]}]
    with client.responses.stream(model=MODEL, input=parts, max_output_tokens=12, temperature=0,  # type: ignore[arg-type]
                                 extra_body={"stop": None, "ignore_eos": True}) as stream:
        events = list(stream)
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens == 12
    full = final.output_text
    stop = full[4:6]
    cut = client.responses.create(model=MODEL, input=parts, max_output_tokens=12, temperature=0,  # type: ignore[arg-type]
                                  extra_body={"stop": [stop], "ignore_eos": True})
    assert cut.output_text == full[: full.index(stop)]
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input="hi", extra_body={"top_k": -5})
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "top_k"


BAD_SCHEMA = {"type": "object", "properties": {"a": {"type": "nosuch"}}}


@pytest.mark.parametrize(("fields", "param"), [
    # Refused by the engine (the prompt, the output grammar) and by the gateway's chat checks: each
    # named the chat field it was translated into (messages, response_format, max_completion_tokens).
    ({"input": "word " * 3000}, "input"),
    ({"input": "word " * 3000, "stream": True}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "word " * 3000}]}]}, "input"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "v", "schema": BAD_SCHEMA}}}, "text.format"),
    ({"input": "hi", "max_output_tokens": 10**9}, "max_output_tokens"),
    # Already Responses names: kept.
    ({"input": "hi", "tools": [{**FORECAST, "parameters": BAD_SCHEMA}], "tool_choice": "required"}, "tools"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": [{"type": "message", "role": "bogus", "content": "x"}]}, "input[0].role"),
])
def test_every_400_names_a_field_of_the_responses_request(client: openai.OpenAI, fields: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, **fields)
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == param, body
    assert "max_completion_tokens" not in body["message"] and "response_format" not in body["message"]
