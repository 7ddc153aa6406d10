"""Tools written into the conversation for chat templates that cannot render them (Hermes format):
the pure rewrite, and a real server whose model has such a template (SmolLM2's kind)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from live_server import LiveServer

from blink.backends.tool_prompt import inline_tools, needs_inlining, renders_tools
from blink.config.models import EmbeddedModel
from blink.config.settings import Settings
from blink.demo.tiny import CHATML_TEMPLATE
from blink.serve import build_app

# SmolLM2-135M-Instruct's template: role and content only.
PLAIN_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                  "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                  "{% endif %}")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def test_which_templates_render_tools() -> None:
    assert renders_tools(CHATML_TEMPLATE) and not renders_tools(PLAIN_TEMPLATE) and not renders_tools(None)
    assert not needs_inlining([{"role": "user", "content": "hi"}], None)
    assert needs_inlining([{"role": "tool", "content": "18"}], None)


def test_tools_join_the_system_message_and_history_becomes_text() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [CALL, {**CALL, "id": "c2"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
                {"role": "tool", "tool_call_id": "c2", "content": "sunny"},
                {"role": "assistant", "content": "It is 18 C and sunny."}]
    out = inline_tools(messages, [WEATHER])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant"]
    assert out[0]["content"].startswith("Be brief.\n\n# Tools") and json.dumps(WEATHER) in out[0]["content"]
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert out[2] == {"role": "assistant", "content": f"{call}\n{call}"}
    assert out[3]["content"] == "<tool_response>\n18 C\n</tool_response>\n<tool_response>\nsunny\n</tool_response>"
    assert out[4] == messages[5] and messages[2]["tool_calls"]  # the request's own messages are untouched
    assert inline_tools([{"role": "user", "content": "x"}], [WEATHER])[0]["role"] == "system"


@pytest.fixture(scope="module")
def url(tiny_qwen2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    plain = tmp_path_factory.mktemp("plain") / "model"
    shutil.copytree(tiny_qwen2, plain)
    (plain / "chat_template.jinja").write_text(PLAIN_TEMPLATE)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    (plain / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": PLAIN_TEMPLATE}))
    settings = Settings(models=[EmbeddedModel(name="plain", kind="embedded", model=str(plain), dtype="float32",
                                              threads=1)])
    with LiveServer(build_app(settings)) as server:
        yield server.url


def test_a_model_whose_template_ignores_tools_sees_them(url: str) -> None:
    history = [{"role": "user", "content": "Paris?"},
               {"role": "assistant", "content": None,
                "tool_calls": [{**CALL, "function": {**CALL["function"], "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "18 C"}]
    ids = httpx.post(f"{url}/tokenize", json={"model": "plain", "messages": history, "tools": [WEATHER]}).json()["tokens"]
    prompt = httpx.post(f"{url}/detokenize", json={"model": "plain", "tokens": ids}).json()["prompt"]
    assert "<tools>\n" + json.dumps(WEATHER) in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>" in prompt


def test_tool_choice_auto_and_forced_are_served(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    ask: Any = [{"role": "user", "content": "Weather in Paris?"}]
    auto = client.chat.completions.create(model="plain", messages=ask, tools=[WEATHER], max_tokens=8)  # type: ignore[list-item]
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")  # served, not a 400
    # An enum keeps the random model's constrained call short.
    short = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
        "additionalProperties": False}}}
    forced = client.chat.completions.create(model="plain", messages=ask, tools=[short], max_tokens=64,  # type: ignore[list-item]
                                            tool_choice="required", temperature=0)
    calls = forced.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(calls[0].function.arguments)["city"] in ("Paris", "Oslo")  # type: ignore[union-attr]
