"""Tool calls read out of a model's text, one parser per output format, fed as the text streams.

Models announce calls in their own formats: Hermes / Qwen wrap a JSON object in
``<tool_call>...</tool_call>``; Llama 3.x answers with a bare JSON object (after the special
``<|python_tag|>``, which decoding usually drops); Mistral starts with ``[TOOL_CALLS]`` and a JSON
list (or, with newer tokenizers, ``name[ARGS]{...}``). A parser takes text as it is decoded and
returns what is plain content now and which calls are complete; text that only might start a call
is held back until it is clear. A call whose JSON does not parse stays content: the client sees
what the model wrote rather than a 500 or a silently dropped answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

ParserName = Literal["hermes", "llama3_json", "mistral"]
PARSER_NAMES: tuple[ParserName, ...] = ("hermes", "llama3_json", "mistral")


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    # The arguments as JSON text (OpenAI's ``function.arguments``).
    arguments: str


class ToolCallParser(Protocol):
    """Incremental: ``feed`` each text delta, ``finish`` once at the end; both return
    (content to show now, calls completed now)."""

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]: ...

    def finish(self) -> tuple[str, list[ParsedCall]]: ...


def detect_parser(chat_template: str | None) -> ParserName | None:
    """The format a chat template teaches its model, from the markers it writes; None if none."""
    text = chat_template or ""
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if "<tool_call>" in text:
        return "hermes"
    if "<|python_tag|>" in text or "ipython" in text:
        return "llama3_json"
    return None


def make_parser(name: ParserName) -> ToolCallParser:
    if name == "hermes":
        return HermesParser()
    if name == "llama3_json":
        return Llama3JsonParser()
    return MistralParser()


def call_from_object(obj: Any, args_keys: tuple[str, ...] = ("arguments", "parameters")) -> ParsedCall | None:
    """``{"name": str, "arguments": {...}}`` (or ``"parameters"``) -> a call; None otherwise."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    for key in args_keys:
        if key in obj:
            args = obj[key]
            if isinstance(args, str):  # some models emit the arguments already encoded
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError):
                    return None
            if not isinstance(args, dict):
                return None
            return ParsedCall(obj["name"], json.dumps(args, ensure_ascii=False))
    return ParsedCall(obj["name"], "{}")


def _held_prefix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag`` (held back)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number, between text."""

    OPEN = "<tool_call>"
    CLOSE = "</tool_call>"

    def __init__(self) -> None:
        self._buf = ""
        self._inside = False

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        self._buf += text
        content: list[str] = []
        calls: list[ParsedCall] = []
        while True:
            if not self._inside:
                at = self._buf.find(self.OPEN)
                if at < 0:
                    keep = _held_prefix(self._buf, self.OPEN)
                    content.append(self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    break
                content.append(self._buf[:at])
                self._buf = self._buf[at + len(self.OPEN) :]
                self._inside = True
            end = self._buf.find(self.CLOSE)
            if end < 0:
                break
            body, self._buf = self._buf[:end], self._buf[end + len(self.CLOSE) :]
            self._inside = False
            call = self._parse(body)
            if call is None:
                content.append(self.OPEN + body + self.CLOSE)
            else:
                calls.append(call)
        return "".join(content), calls

    def finish(self) -> tuple[str, list[ParsedCall]]:
        """An unclosed call (the model stopped right after its JSON) still counts if it parses."""
        buf, inside = self._buf, self._inside
        self._buf, self._inside = "", False
        if not inside:
            return buf, []
        call = self._parse(buf)
        return ("", [call]) if call is not None else (self.OPEN + buf, [])

    @staticmethod
    def _parse(body: str) -> ParsedCall | None:
        try:
            return call_from_object(json.loads(body))
        except (ValueError, RecursionError):
            return None


def _json_values(text: str) -> list[Any] | None:
    """Consecutive JSON values separated by whitespace or ``;`` (Llama's parallel calls); None if
    anything else is there."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos = 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == ";"):
            pos += 1
        if pos >= len(text):
            return values
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return None
        values.append(value)


class _WholeOutputParser:
    """Formats whose calls are known only once the text ends: hold everything that may be a call."""

    def __init__(self) -> None:
        self._buf = ""
        self._holding: bool | None = None  # None: undecided yet (only whitespace so far)

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        if self._holding is False:
            return text, []
        self._buf += text
        decision = self._starts_call(self._buf)
        if decision is None:
            return "", []
        self._holding = decision
        if decision:
            return "", []
        out, self._buf = self._buf, ""
        return out, []

    def finish(self) -> tuple[str, list[ParsedCall]]:
        buf, self._buf = self._buf, ""
        if not self._holding:
            return buf, []
        calls = self._parse(buf)
        return ("", calls) if calls else (buf, [])

    def _starts_call(self, text: str) -> bool | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _parse(self, text: str) -> list[ParsedCall] | None:  # pragma: no cover - overridden
        raise NotImplementedError


class Llama3JsonParser(_WholeOutputParser):
    """A reply that is one or more ``{"name": ..., "parameters": {...}}`` objects (``;``-separated),
    optionally after ``<|python_tag|>``; any other reply is content."""

    TAG = "<|python_tag|>"

    def _starts_call(self, text: str) -> bool | None:
        stripped = text.lstrip()
        if not stripped:
            return None
        if stripped.startswith("{") or stripped.startswith(self.TAG):
            return True
        return None if self.TAG.startswith(stripped) else False

    def _parse(self, text: str) -> list[ParsedCall] | None:
        body = text.lstrip()
        if body.startswith(self.TAG):
            body = body[len(self.TAG) :]
        values = _json_values(body)
        if not values:
            return None
        calls = [call_from_object(v, ("parameters", "arguments")) for v in values]
        return None if any(c is None for c in calls) else [c for c in calls if c is not None]


class MistralParser(_WholeOutputParser):
    """Text, then ``[TOOL_CALLS]`` and a JSON list of ``{"name", "arguments"}``, or (v11+ tokenizers)
    ``[TOOL_CALLS]name[ARGS]{...}`` repeated. The tag is a special token: the request must be decoded
    with special tokens kept (``needs_special_tokens``)."""

    TAG = "[TOOL_CALLS]"
    ARGS = "[ARGS]"

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        if self._holding:
            self._buf += text
            return "", []
        self._buf += text
        at = self._buf.find(self.TAG)
        if at >= 0:
            out, self._buf = self._buf[:at], self._buf[at:]
            self._holding = True
            return out, []
        keep = _held_prefix(self._buf, self.TAG)
        out, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
        return out, []

    def _parse(self, text: str) -> list[ParsedCall] | None:
        parts = [p for p in text.split(self.TAG) if p.strip()]
        calls: list[ParsedCall] = []
        for part in parts:
            part = part.strip()
            if part.startswith("["):
                values = _json_values(part)
                if not values or not isinstance(values[0], list) or len(values) != 1:
                    return None
                found = [call_from_object(v) for v in values[0]]
                if not found or any(c is None for c in found):
                    return None
                calls += [c for c in found if c is not None]
                continue
            name, sep, args = part.partition(self.ARGS)
            if not sep:
                return None
            call = call_from_object({"name": name.strip(), "arguments": _loads(args)})
            if call is None:
                return None
            calls.append(call)
        return calls or None


def _loads(text: str) -> Any:
    """``text`` as JSON, or None; text nested past json's stack (RecursionError, here as at every
    ``json.loads`` of model output) is unreadable like any other, never an error."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def needs_special_tokens(name: ParserName) -> bool:
    """Whether the format's marker is a special token that decoding must keep."""
    return name == "mistral"
