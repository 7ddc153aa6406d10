"""Deltas -> one non-streamed ``chat.completion`` / ``text_completion`` response body."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from blink.backends.base import Delta, PromptLogprob, TokenLogprob, Usage
from blink.gateway.rendering.logprobs_format import chat_logprobs, completion_logprobs, prompt_logprobs
from blink.gateway.rendering.streaming import usage_dict


@dataclass(slots=True)
class _Choice:
    parts: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    token_ids: list[int] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list[PromptLogprob | None] | None = None


class ResponseAggregator:
    """Collects every delta of a request, then renders the OpenAI response object."""

    def __init__(self, kind: str, n: int, want_logprobs: bool, return_token_ids: bool = False) -> None:
        self._kind = kind
        self._want_logprobs = want_logprobs
        # vLLM's return_token_ids: prompt and output token ids in the body.
        self._return_token_ids = return_token_ids
        self._choices = [_Choice() for _ in range(n)]
        self.usage: Usage | None = None
        # Output tokens delivered so far (token ids, else one per output-carrying delta): what an
        # abandoned response is charged when no usage came (GenerationResponse's ``on_abandon``).
        self.output_tokens = 0
        # The prompt's tokens as the backend counted them on its first delta (``Delta.prompt_tokens``),
        # None when it told none (an upstream that reports usage only at the end).
        self.prompt_tokens: int | None = None
        # A delta came: the backend took the request (an error before any is a refusal, not charged).
        self.began = False

    def add(self, d: Delta) -> None:
        self.began = True
        self.output_tokens += len(d.token_ids) or (1 if d.text or d.tool_calls else 0)
        if d.prompt_tokens is not None:
            self.prompt_tokens = d.prompt_tokens
        while d.index >= len(self._choices):
            self._choices.append(_Choice())
        choice = self._choices[d.index]
        if d.text:
            choice.parts.append(d.text)
        if d.logprobs:
            choice.logprobs.extend(d.logprobs)
        if d.tool_calls:
            _merge_tool_calls(choice.tool_calls, d.tool_calls)
        if d.finish_reason is not None:
            choice.finish_reason = d.finish_reason
        if self._return_token_ids:
            choice.token_ids.extend(d.token_ids)
        if d.prompt_token_ids is not None:
            choice.prompt_token_ids = d.prompt_token_ids
        if d.prompt_logprobs is not None:
            choice.prompt_logprobs = d.prompt_logprobs
        if d.usage is not None:
            self.usage = d.usage

    def usage_so_far(self) -> Usage:
        """The usage reported, or, for a response that ended before its usage came, the prompt
        tokens the backend counted (0 when it counted none) and the output tokens delivered."""
        if self.usage is not None:
            return self.usage
        return Usage(prompt_tokens=self.prompt_tokens or 0, completion_tokens=self.output_tokens)

    def render(self, request_id: str, model: str, created: int) -> dict[str, Any]:
        chat = self._kind == "chat"
        choices = [self._chat_choice(i, c) if chat else self._text_choice(i, c) for i, c in enumerate(self._choices)]
        body = {
            "id": request_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": usage_dict(self.usage),
        }
        if chat and self._choices:  # vLLM puts a chat's prompt data beside the choices
            first = self._choices[0]
            if first.prompt_logprobs is not None:
                body["prompt_logprobs"] = prompt_logprobs(first.prompt_logprobs)
            if self._return_token_ids:
                body["prompt_token_ids"] = first.prompt_token_ids
        return body

    def _chat_choice(self, index: int, c: _Choice) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(c.parts), "refusal": None}
        if c.tool_calls:
            message["tool_calls"] = [c.tool_calls[k] for k in sorted(c.tool_calls)]
            message["content"] = message["content"] or None
        logprobs = {"content": chat_logprobs(c.logprobs), "refusal": None} if self._want_logprobs else None
        choice = {"index": index, "message": message, "logprobs": logprobs, "finish_reason": c.finish_reason}
        if self._return_token_ids:
            choice["token_ids"] = c.token_ids
        return choice

    def _text_choice(self, index: int, c: _Choice) -> dict[str, Any]:
        logprobs = completion_logprobs(c.logprobs, 0) if self._want_logprobs else None
        choice = {"index": index, "text": "".join(c.parts), "logprobs": logprobs, "finish_reason": c.finish_reason}
        if c.prompt_logprobs is not None:
            choice["prompt_logprobs"] = prompt_logprobs(c.prompt_logprobs)
        if self._return_token_ids:
            choice["prompt_token_ids"] = c.prompt_token_ids
            choice["token_ids"] = c.token_ids
        return choice


def _merge_tool_calls(acc: dict[int, dict[str, Any]], fragments: list[dict[str, Any]]) -> None:
    """Streamed tool calls arrive in pieces keyed by ``index``; arguments concatenate."""
    for frag in fragments:
        slot = acc.setdefault(
            frag.get("index", len(acc)), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if frag.get("id"):
            slot["id"] = frag["id"]
        fn = frag.get("function") or {}
        slot["function"]["name"] += fn.get("name") or ""
        slot["function"]["arguments"] += fn.get("arguments") or ""
