"""Tool calls for the embedded engine: which parser reads a request's output, and OpenAI deltas.

A request with tools and ``tool_choice: auto`` is read by the model's own format parser
(``tool_parsers``); a forced call (``required`` / a named function) was constrained by the
grammar to one JSON value, which is read directly; ``tool_choice: none`` offers the tools to the
template but parses nothing (vLLM's behaviour). Calls go out as OpenAI streams them: a first
delta with ``index``, ``id``, ``type`` and ``function.name``, then the arguments; the choice then
ends with ``finish_reason: "tool_calls"`` (``"stop"`` for a named function, as OpenAI does).
"""

from __future__ import annotations

import dataclasses
import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from random import choices, getrandbits
from typing import Any

from blink.backends.base import Delta, GenerationRequest, SamplingOptions, StructuredOutput
from blink.backends.chat_messages import ChatInputs, chat_inputs
from blink.backends.tool_parsers import (
    ParsedCall,
    ParserName,
    ToolCallParser,
    call_from_object,
    make_parser,
    needs_special_tokens,
)
from blink.backends.tool_plan import ToolPlan, forced_call_json, plan_tools
from blink.backends.tool_prompt import inline_tools, needs_inlining
from blink.protocol.errors import InvalidRequestError

_ALNUM = string.ascii_letters + string.digits


def openai_call_id() -> str:
    """``call_`` + 24 hex digits, the shape OpenAI's ids have (unique, not secret)."""
    return f"call_{getrandbits(96):024x}"


def mistral_call_id() -> str:
    """Nine letters and digits: Mistral's chat templates refuse any other id when the client sends
    the call back in the next turn."""
    return "".join(choices(_ALNUM, k=9))


class ForcedCallParser:
    """The grammar made the whole output one JSON value (a call object, or a list of them)."""

    def __init__(self) -> None:
        self._buf: list[str] = []

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        self._buf.append(text)
        return "", []

    def finish(self) -> tuple[str, list[ParsedCall]]:
        text = "".join(self._buf)
        self._buf = []
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # cut short (max_tokens)
            # A list of calls keeps the calls it finished (the model made them; the client would
            # otherwise get the grammar's JSON as its answer); a single call cut short is content.
            done = _finished_calls(text)
            return ("", done) if done else (text, [])
        items = value if isinstance(value, list) else [value]
        calls = [call_from_object(v, ("arguments",)) for v in items]
        if not calls or any(c is None for c in calls):
            return text, []
        return "", [c for c in calls if c is not None]


_JSON = json.JSONDecoder()
_SPACE = " \t\r\n"


def _finished_calls(text: str) -> list[ParsedCall]:
    """The whole calls at the head of a list of calls cut short (``[{...}, {...}, {"na``)."""
    pos = len(text) - len(text.lstrip(_SPACE))
    if not text.startswith("[", pos):
        return []
    calls: list[ParsedCall] = []
    pos += 1
    while True:
        while pos < len(text) and text[pos] in _SPACE:
            pos += 1
        try:
            obj, pos = _JSON.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return calls  # the element the cut fell in
        call = call_from_object(obj, ("arguments",))
        if call is None:
            return []
        calls.append(call)
        while pos < len(text) and text[pos] in _SPACE:
            pos += 1
        if not text.startswith(",", pos):
            return calls
        pos += 1


def parser_factory(plan: ToolPlan | None, parser: ParserName | None) -> Callable[[], ToolCallParser] | None:
    """How this request's output is read for calls; None when it is plain content.

    ``InvalidRequestError`` for ``tool_choice: auto`` on a model with no known call format: the
    tools would reach the prompt but no call could ever come back.
    """
    if plan is None or plan.mode == "none":
        return None
    if plan.forced:
        return ForcedCallParser
    if parser is None:
        raise InvalidRequestError(
            "'tool_choice': 'auto' needs a tool-call parser, and this model's chat template shows no known "
            "tool-call format; set the model's 'tool_parser' (hermes, llama3_json, mistral), or use "
            "'tool_choice': 'required' or a named function.",
            param="tool_choice", code="unsupported_parameter")
    return lambda: make_parser(parser)


class ToolCallStream:
    """Rewrites one request's deltas (all its choices): content stays text, calls become
    ``tool_calls`` fragments, and a choice that called a tool ends with the tool-call reason."""

    def __init__(self, factory: Callable[[], ToolCallParser], plan: ToolPlan,
                 new_id: Callable[[], str] = openai_call_id) -> None:
        self._factory = factory
        self._new_id = new_id
        self._max_calls = 1 if (plan.mode == "named" or not plan.parallel) else None
        self._finish = "stop" if plan.mode == "named" else "tool_calls"
        self._parsers: dict[int, ToolCallParser] = {}
        self._emitted: dict[int, int] = {}

    def rewrite(self, d: Delta) -> list[Delta]:
        parser = self._parsers.get(d.index)
        if parser is None:
            parser = self._parsers[d.index] = self._factory()
        content, calls = parser.feed(d.text)
        if d.finish_reason is not None:
            late_content, late_calls = parser.finish()
            content += late_content
            calls += late_calls
        emitted = self._emitted.get(d.index, 0)
        if self._max_calls is not None:
            calls = calls[: max(0, self._max_calls - emitted)]
        if (emitted or calls) and not content.strip():
            content = ""  # the whitespace between and after calls is not an answer
        out = [Delta(index=d.index, text=content, token_ids=d.token_ids, logprobs=d.logprobs,
                     prompt_logprobs=d.prompt_logprobs, prompt_token_ids=d.prompt_token_ids,
                     prompt_tokens=d.prompt_tokens)]
        for k, call in enumerate(calls):
            out += _call_deltas(d.index, emitted + k, call, self._new_id())
        self._emitted[d.index] = emitted + len(calls)
        for delta in out[:-1]:
            delta.more = True
        last = out[-1]
        last.more = d.more
        last.usage = d.usage
        last.finish_reason = d.finish_reason
        last.stop_reason = d.stop_reason
        if d.finish_reason == "stop" and self._emitted[d.index]:
            last.finish_reason = self._finish
        return out


def _call_deltas(choice: int, index: int, call: ParsedCall, call_id: str) -> list[Delta]:
    head: dict[str, Any] = {"index": index, "id": call_id, "type": "function",
                            "function": {"name": call.name, "arguments": ""}}
    args: dict[str, Any] = {"index": index, "function": {"arguments": call.arguments}}
    return [Delta(index=choice, tool_calls=[head]), Delta(index=choice, tool_calls=[args])]


@dataclass(slots=True)
class RequestTools:
    """What tools change about one request on the embedded engine."""

    # The sampling options, with the forced call's schema when there is one.
    options: SamplingOptions
    # The chat template's inputs (None for a completion).
    chat: ChatInputs | None
    # Rewrites the output's deltas into tool calls; None when nothing is parsed.
    calls: ToolCallStream | None
    # Decode with special tokens kept (the format's call marker is one).
    keep_special_tokens: bool


def prepare_tools(req: GenerationRequest, parser_of_model: Callable[[], ParserName | None],
                  inline: bool = False) -> RequestTools:
    """Validate the request's tools and derive the template inputs, constraint and output reader.

    ``parser_of_model`` is asked only when the request has tools. ``inline``: the model's template
    cannot render tools, so they are written into the messages (tool_prompt.py).
    ``InvalidRequestError`` names the field.
    """
    if req.kind != "chat":
        return RequestTools(req.options, None, None, False)
    plan = plan_tools(req.extra)
    parser = parser_of_model() if plan is not None and plan.mode == "auto" else None
    factory = parser_factory(plan, parser)
    chat = _template_inputs(req, plan, inline)
    options = _forced_options(req.options, plan)
    if factory is None or plan is None:
        return RequestTools(options, chat, None, False)
    new_id = mistral_call_id if parser == "mistral" else openai_call_id
    keep = parser is not None and needs_special_tokens(parser)
    return RequestTools(options, chat, ToolCallStream(factory, plan, new_id), keep)


def template_inputs(req: GenerationRequest, inline: bool = False) -> ChatInputs | None:
    """What the chat template renders for ``req`` (its tools validated), for counting its tokens
    without generating: no call format is needed, as no output is read (None for a completion)."""
    return _template_inputs(req, plan_tools(req.extra), inline) if req.kind == "chat" else None


def _template_inputs(req: GenerationRequest, plan: ToolPlan | None, inline: bool) -> ChatInputs:
    kwargs = req.extra.get("chat_template_kwargs")
    chat = chat_inputs(req.messages or [], plan.tools if plan is not None else None,
                       kwargs if isinstance(kwargs, dict) else None)
    if inline and needs_inlining(chat.messages, chat.tools):
        return ChatInputs(inline_tools(chat.messages, chat.tools), None, chat.template_kwargs)
    return chat


def _forced_options(options: SamplingOptions, plan: ToolPlan | None) -> SamplingOptions:
    """A forced call (``required`` / a named function) is a JSON schema for the grammar engine."""
    if plan is None or not plan.forced:
        return options
    if options.structured is not None:
        raise InvalidRequestError("A forced 'tool_choice' cannot be combined with 'response_format' or another "
                                  "output constraint.", param="tool_choice", code="invalid_value")
    return dataclasses.replace(options, structured=StructuredOutput("json_schema", forced_call_json(plan), param="tools"))
