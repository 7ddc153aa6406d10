"""The whole ``tool_choice: auto`` path on a real engine, with a model that really calls a tool.

A random model never writes ``<tool_call>`` by itself, so this test teaches one: the tiny Llama is
fitted (a few hundred Adam steps on the CPU) to answer one prompt, rendered by its own template
with the tools, with two Hermes-style calls. Served by ``blink serve``, that greedy answer then
goes through the engine, the Hermes parser and the gateway to the real openai client (whole and
streamed) and LangChain, exactly as a tool-calling model's would. A second copy is taught Llama 3.x's
bare-JSON calls and served with ``tool_parser: llama3_json``: the setting overrides the template's format.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from live_server import LiveServer

from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.serve import build_registry

MODEL = "taught"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
ANSWER = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
          '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>')
# The same calls as Llama 3.x writes them, for a model served with ``tool_parser: llama3_json``.
LLAMA_MODEL = "taught-llama"
LLAMA_ANSWER = ('{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                '{"name": "get_weather", "parameters": {"city": "Oslo"}}<|im_end|>')
# Fitting stops once greedy decoding reproduces the answer with this much margin (nats, for fp32
# noise between transformers and the engine's kernels), or gives up after _MAX_STEPS.
_MARGIN = 2.0
_MAX_STEPS = 600


def _teach(path: Path, answer: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    prompt = tok.apply_chat_template(ASK, tools=[WEATHER], add_generation_prompt=True, tokenize=False)
    p = tok.encode(prompt, add_special_tokens=False)
    t = tok.encode(answer, add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    ids = torch.tensor([p + t])
    labels = ids.clone()
    labels[0, : len(p)] = -100
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    target = torch.tensor(t)
    for _ in range(_MAX_STEPS):
        out = model(input_ids=ids, labels=labels)
        logits = out.logits[0, len(p) - 1 : -1].detach()
        top2 = logits.topk(2, dim=-1)
        chosen = logits.gather(1, target[:, None])[:, 0]
        runner_up = torch.where(top2.indices[:, 0] == target, top2.values[:, 1], top2.values[:, 0])
        if bool(((chosen - runner_up) > _MARGIN).all()):
            model.save_pretrained(str(path), safe_serialization=True)
            return
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    raise RuntimeError("the tiny model did not learn the tool-call answer")


@pytest.fixture(scope="module")
def url(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("taught")
    models = []
    for name, answer, parser in ((MODEL, ANSWER, "auto"), (LLAMA_MODEL, LLAMA_ANSWER, "llama3_json")):
        path = root / name
        shutil.copytree(tiny_llama, path)
        _teach(path, answer)
        models.append(EmbeddedModel(name=name, kind="embedded", model=str(path), dtype="float32", threads=1,
                                    max_model_len=1024, tool_parser=parser))
    settings = Settings(server=ServerSettings(max_concurrent_streams=4), models=models)
    with LiveServer(create_app(build_registry(settings), settings.server)) as server:
        yield server.url


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def _create(url: str, model: str = MODEL, **kw: Any) -> Any:
    return _client(url).chat.completions.create(model=model, messages=ASK, tools=[WEATHER], temperature=0,  # type: ignore[arg-type]
                                                max_tokens=400, **kw)


@pytest.mark.parametrize("model", [MODEL, LLAMA_MODEL])
def test_auto_calls_non_streamed(url: str, model: str) -> None:
    res = _create(url, model)
    choice = res.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]
    assert len({c.id for c in calls}) == 2 and all(c.type == "function" for c in calls)


@pytest.mark.parametrize("model", [MODEL, LLAMA_MODEL])
def test_auto_calls_streamed_as_incremental_deltas(url: str, model: str) -> None:
    calls: dict[int, dict[str, str]] = {}
    finish = None
    content = ""
    for chunk in _create(url, model, stream=True):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            content += choice.delta.content or ""
            for frag in choice.delta.tool_calls or []:
                slot = calls.setdefault(frag.index, {"id": "", "name": "", "arguments": ""})
                if frag.id:
                    assert not slot["id"] and frag.type == "function" and frag.function and frag.function.name
                    slot["id"] = frag.id
                else:
                    assert slot["id"], "the first fragment of a call carries its id"
                if frag.function is not None:
                    slot["name"] += frag.function.name or ""
                    slot["arguments"] += frag.function.arguments or ""
    assert finish == "tool_calls" and content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]


def test_parallel_false_keeps_the_first_call_and_none_parses_nothing(url: str) -> None:
    one = _create(url, parallel_tool_calls=False).choices[0].message.tool_calls
    assert one is not None and len(one) == 1 and json.loads(one[0].function.arguments) == {"city": "Paris"}
    plain = _create(url, tool_choice="none").choices[0]
    assert plain.message.tool_calls is None and plain.finish_reason == "stop"
    assert plain.message.content == ANSWER.removesuffix("<|im_end|>")


def test_langchain_bind_tools_auto(url: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=f"{url}/v1", api_key="unused", model=MODEL, temperature=0, max_tokens=400,
                     max_retries=0)
    answer = llm.bind_tools([WEATHER]).invoke(ASK[0]["content"])
    assert [(c["name"], c["args"]) for c in answer.tool_calls] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]
