"""Deltas -> OpenAI tool-call deltas: per choice, incremental, limits and finish reasons."""

from __future__ import annotations

import json

import pytest

from blink.backends.base import Delta, Usage
from blink.backends.embedded_tools import ForcedCallParser, ToolCallStream, parser_factory
from blink.backends.tool_parsers import HermesParser
from blink.backends.tool_plan import plan_tools
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.protocol.errors import InvalidRequestError

TOOLS = [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}]
CALLS = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n<tool_call>{"name": "g", "arguments": {}}</tool_call>'


def _stream(raw: dict, parser: str | None = "hermes") -> ToolCallStream:
    plan = plan_tools({"tools": TOOLS, **raw})
    assert plan is not None
    factory = parser_factory(plan, parser)  # type: ignore[arg-type]
    assert factory is not None
    return ToolCallStream(factory, plan)


def _feed(stream: ToolCallStream, text: str, step: int = 3, index: int = 0) -> list[Delta]:
    out: list[Delta] = []
    pieces = [text[i : i + step] for i in range(0, len(text), step)]
    for k, piece in enumerate(pieces):
        last = k == len(pieces) - 1
        out += stream.rewrite(Delta(index=index, text=piece, token_ids=[k], finish_reason="stop" if last else None,
                                    usage=Usage(3, len(pieces)) if last else None))
    return out


def test_calls_stream_as_openai_fragments_and_aggregate() -> None:
    deltas = _feed(_stream({}), CALLS)
    frags = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert [f.get("function", {}).get("name") for f in frags] == ["f", None, "g", None]
    head = frags[0]
    assert head["index"] == 0 and head["type"] == "function" and head["id"].startswith("call_")
    assert head["function"]["arguments"] == ""
    assert json.loads(frags[1]["function"]["arguments"]) == {"a": 1} and frags[1]["index"] == 0
    assert frags[2]["index"] == 1
    assert all(d.text == "" for d in deltas)
    assert deltas[-1].finish_reason == "tool_calls" and deltas[-1].usage is not None
    assert sum(len(d.token_ids) for d in deltas) == len(range(0, len(CALLS), 3))
    agg = ResponseAggregator("chat", 1, False)
    for d in deltas:
        agg.add(d)
    message = agg.render("id", "m", 0)["choices"][0]["message"]
    assert message["content"] is None
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["f", "g"]


def test_parallel_false_keeps_one_call() -> None:
    deltas = _feed(_stream({"parallel_tool_calls": False}), CALLS)
    assert [d.tool_calls[0]["function"]["name"] for d in deltas if d.tool_calls and "id" in d.tool_calls[0]] == ["f"]


def test_plain_answer_is_content_with_its_own_finish_reason() -> None:
    deltas = _feed(_stream({}), "Just text, no call.")
    assert "".join(d.text for d in deltas) == "Just text, no call."
    assert deltas[-1].finish_reason == "stop" and not any(d.tool_calls for d in deltas)


def test_choices_are_parsed_separately() -> None:
    stream = _stream({})
    a = _feed(stream, CALLS, index=0)
    b = _feed(stream, "hello", index=1)
    assert a[-1].finish_reason == "tool_calls" and b[-1].finish_reason == "stop"
    assert "".join(d.text for d in b) == "hello"


def test_forced_output_is_read_as_json() -> None:
    stream = _stream({"tool_choice": "required"}, parser=None)
    deltas = _feed(stream, '[{"name": "g", "arguments": {"z": true}}, {"name": "f", "arguments": {}}]')
    names = [d.tool_calls[0]["function"]["name"] for d in deltas if d.tool_calls and "id" in d.tool_calls[0]]
    assert names == ["g", "f"] and deltas[-1].finish_reason == "tool_calls"
    named = _stream({"tool_choice": {"type": "function", "function": {"name": "f"}}}, parser=None)
    deltas = _feed(named, '{"name": "f", "arguments": {"a": 2}}')
    assert deltas[-1].finish_reason == "stop"  # OpenAI's reason for a named function
    assert [d for d in deltas if d.tool_calls]


def test_forced_output_cut_short_is_content() -> None:
    p = ForcedCallParser()
    assert p.feed('{"name": "f", "argu') == ("", [])
    assert p.finish() == ('{"name": "f", "argu', [])
    deep = "[" * 5000 + "]" * 5000  # a schema may allow nesting past json's stack: content, not an error
    p.feed(deep)
    assert p.finish() == (deep, [])


def test_forced_list_cut_short_keeps_its_finished_calls() -> None:
    """max_tokens inside the second of parallel calls: the first, whole, is a call (it used to
    come back as content: the grammar's JSON as the answer, which an agent took as final)."""
    stream = _stream({"tool_choice": "required"}, parser=None)
    text = '[{"name": "g", "arguments": {"z": true}}, {"name": "f", "argu'
    deltas = stream.rewrite(Delta(index=0, text=text, finish_reason="length"))
    heads = [d.tool_calls[0] for d in deltas if d.tool_calls and "id" in d.tool_calls[0]]
    assert [h["function"]["name"] for h in heads] == ["g"]
    assert "".join(d.text for d in deltas) == "" and deltas[-1].finish_reason == "length"
    p = ForcedCallParser()
    p.feed('[{"name": "g", "argu')
    assert p.finish() == ('[{"name": "g", "argu', [])  # nothing finished: content, as before


def test_auto_without_a_known_format_is_refused() -> None:
    plan = plan_tools({"tools": TOOLS})
    with pytest.raises(InvalidRequestError) as exc:
        parser_factory(plan, None)
    assert exc.value.param == "tool_choice"
    assert parser_factory(plan_tools({"tools": TOOLS, "tool_choice": "none"}), None) is None
    assert parser_factory(None, "hermes") is None
    factory = parser_factory(plan, "hermes")
    assert factory is not None and isinstance(factory(), HermesParser)


def test_wire_shape_is_what_the_openai_sdk_reads() -> None:
    """The SSE chunks and the whole body, as the gateway encodes them, validate as the SDK's types."""
    import orjson
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    from blink.gateway.rendering.streaming import ChunkEncoder

    deltas = _feed(_stream({}), "Checking. " + CALLS, step=5)
    enc = ChunkEncoder("chat", "chatcmpl-1", "m", 0, include_usage=False)
    chunks = [ChatCompletionChunk.model_validate(orjson.loads(b[6:])) for d in deltas
              if (b := enc.encode(d)) is not None]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assembled: dict[int, list[str]] = {}
    for c in chunks:
        for frag in c.choices[0].delta.tool_calls or []:
            slot = assembled.setdefault(frag.index, ["", ""])
            slot[0] += (frag.function.name or "") if frag.function else ""
            slot[1] += (frag.function.arguments or "") if frag.function else ""
    assert content == "Checking. "
    assert {k: (n, json.loads(a)) for k, (n, a) in assembled.items()} == {0: ("f", {"a": 1}), 1: ("g", {})}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    agg = ResponseAggregator("chat", 1, False)
    for d in deltas:
        agg.add(d)
    whole = ChatCompletion.model_validate(agg.render("chatcmpl-1", "m", 0))
    calls = whole.choices[0].message.tool_calls
    assert whole.choices[0].message.content == "Checking. " and calls is not None
    assert [c.function.name for c in calls] == ["f", "g"]  # type: ignore[union-attr]


def test_call_ids_follow_the_model_family() -> None:
    from blink.backends.embedded_tools import mistral_call_id, openai_call_id

    plan = plan_tools({"tools": TOOLS})
    assert plan is not None
    stream = ToolCallStream(lambda: HermesParser(), plan, mistral_call_id)
    ids = [d.tool_calls[0]["id"] for d in _feed(stream, CALLS) if d.tool_calls and "id" in d.tool_calls[0]]
    assert len(ids) == 2 and all(len(i) == 9 and i.isalnum() for i in ids)
    assert openai_call_id().startswith("call_") and len(openai_call_id()) == 29


def _req(raw: dict, structured: object = None) -> object:
    from blink.backends.base import GenerationRequest, SamplingOptions

    return GenerationRequest(request_id="r", model="m", kind="chat", options=SamplingOptions(structured=structured),  # type: ignore[arg-type]
                             messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                             extra=raw)


def test_prepare_tools_forced_call_is_a_schema_on_a_copy_of_the_options() -> None:
    from blink.backends.base import StructuredOutput
    from blink.backends.embedded_tools import prepare_tools

    req = _req({"tools": TOOLS, "tool_choice": "required"})
    asked: list[int] = []
    setup = prepare_tools(req, lambda: asked.append(1) or "hermes")  # type: ignore[arg-type,func-returns-value]
    assert asked == []  # a forced call needs no format parser
    assert setup.options.structured is not None and setup.options.structured.kind == "json_schema"
    assert setup.options.structured.param == "tools"  # an invalid parameters schema is a 400 naming tools
    assert json.loads(setup.options.structured.spec)["type"] == "array"
    assert req.options.structured is None  # type: ignore[attr-defined]
    assert setup.chat is not None and setup.chat.messages[0]["content"] == "hi" and setup.chat.tools == TOOLS
    assert setup.calls is not None and not setup.keep_special_tokens
    with pytest.raises(InvalidRequestError) as exc:
        prepare_tools(_req({"tools": TOOLS, "tool_choice": "required"}, StructuredOutput("json_object", "")),
                      lambda: None)  # type: ignore[arg-type]
    assert exc.value.param == "tool_choice"


def test_prepare_tools_auto_and_plain() -> None:
    from blink.backends.embedded_tools import prepare_tools

    mistral = prepare_tools(_req({"tools": TOOLS}), lambda: "mistral")  # type: ignore[arg-type]
    assert mistral.keep_special_tokens and mistral.calls is not None and mistral.options.structured is None
    plain = prepare_tools(_req({"chat_template_kwargs": {"enable_thinking": False}}), lambda: None)  # type: ignore[arg-type]
    assert plain.calls is None and plain.chat is not None and plain.chat.tools is None
    assert plain.chat.template_kwargs == {"enable_thinking": False}


def test_the_first_deltas_prompt_data_survive_the_rewrite() -> None:
    """The rewrite built new deltas from the text alone: with tools on, ``return_token_ids`` lost the
    prompt's token ids, ``prompt_logprobs`` its logprobs, and a cut-short stream its prompt count."""
    first = Delta(text="<tool", token_ids=[1], prompt_token_ids=[5, 6], prompt_logprobs=[None], prompt_tokens=2)
    out = _stream({}).rewrite(first)
    assert (out[0].prompt_token_ids, out[0].prompt_logprobs, out[0].prompt_tokens) == ([5, 6], [None], 2)
