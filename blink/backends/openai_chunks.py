"""OpenAI response JSON (stream chunks or whole responses) -> ``Delta`` objects.

An upstream is outside our control: a chunk whose fields have the wrong types (a number for
``content``, a string for ``choices``) is ``MalformedChunk``, which the caller turns into an
upstream error, rather than a value that fails later in a renderer (a 500 there, or a stream cut
without its closing events).
"""

from __future__ import annotations

from typing import Any

from blink.backends.base import Delta, TokenLogprob, Usage


class MalformedChunk(ValueError):
    """A chunk that is a JSON object but not an OpenAI chunk (a field of the wrong type)."""


def deltas_from_chunk(obj: dict[str, Any], kind: str) -> list[Delta]:
    """Deltas in one ``chat.completion.chunk`` / ``text_completion`` chunk (or whole response)."""
    try:
        return _plain_text_delta(obj, kind) or _deltas(obj, kind)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        raise MalformedChunk(f"{type(exc).__name__}: {exc}") from exc


def _deltas(obj: dict[str, Any], kind: str) -> list[Delta]:
    out: list[Delta] = []
    for choice in obj.get("choices") or ():
        index = choice.get("index", 0)
        finish = choice.get("finish_reason")
        tool_calls = None
        if kind == "chat":
            msg = choice.get("delta") or choice.get("message") or {}
            text = _string(msg.get("content"), "content")
            tool_calls = msg.get("tool_calls") or None
            if tool_calls is not None and not all(isinstance(c, dict) for c in _list(tool_calls, "tool_calls")):
                raise TypeError("'tool_calls' holds a non-object")
            logprobs = _chat_logprobs(choice.get("logprobs"))
        else:
            text = _string(choice.get("text"), "text")
            logprobs = _completion_logprobs(choice.get("logprobs"))
        if finish is not None and not isinstance(finish, str):
            raise TypeError("'finish_reason' is not a string")
        if not isinstance(index, int):
            raise TypeError("'index' is not an integer")
        # vLLM's return_token_ids: the choice's token ids, and its prompt's (a chat's sit beside the choices).
        token_ids = choice.get("token_ids") or []
        prompt_ids = choice.get("prompt_token_ids") or obj.get("prompt_token_ids")
        if text or finish or logprobs or tool_calls or token_ids or prompt_ids:
            out.append(
                Delta(index=index, text=text, logprobs=logprobs, finish_reason=finish, tool_calls=tool_calls,
                      token_ids=list(token_ids), prompt_token_ids=list(prompt_ids) if prompt_ids else None,
                      stop_reason=_stop_string(choice.get("stop_reason")))
            )
    usage = obj.get("usage")
    if usage:
        details = usage.get("prompt_tokens_details") or {}
        u = Usage(
            prompt_tokens=_count(usage.get("prompt_tokens"), "prompt_tokens"),
            completion_tokens=_count(usage.get("completion_tokens"), "completion_tokens"),
            cached_tokens=_count(details.get("cached_tokens"), "cached_tokens"),
        )
        if out:
            out[-1].usage = u
        else:
            out.append(Delta(index=0, usage=u))
    return out


def _string(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{field!r} is not a string")
    return value


def _count(value: Any, field: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int):
        raise TypeError(f"{field!r} is not an integer")
    return value


def _list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{field!r} is not a list")
    return value


def _plain_text_delta(obj: dict[str, Any], kind: str) -> list[Delta] | None:
    """The shape of nearly every streamed chunk — one choice, text only — in a few lookups (this
    runs once per token on the proxy path); None sends anything else down the general path."""
    choices = obj.get("choices")
    if obj.get("usage") or not choices or len(choices) != 1:
        return None
    choice = choices[0]
    if choice.get("finish_reason") or choice.get("logprobs") or "token_ids" in choice:
        return None
    if kind == "chat":
        msg = choice.get("delta")
        if msg is None or msg.get("tool_calls"):
            return None
        text = msg.get("content")
    else:
        text = choice.get("text")
    index = choice.get("index", 0)
    if not text or not isinstance(text, str) or type(index) is not int:
        return None
    return [Delta(index=index, text=text)]


def _chat_logprobs(lp: dict[str, Any] | None) -> list[TokenLogprob] | None:
    if not lp or not lp.get("content"):
        return None
    return [
        TokenLogprob(
            token=item["token"],
            logprob=item["logprob"],
            bytes=item.get("bytes"),
            top=[(t["token"], t["logprob"]) for t in item.get("top_logprobs") or ()],
            top_bytes=_top_bytes(item.get("top_logprobs") or ()),
        )
        for item in lp["content"]
    ]


def _top_bytes(tops: Any) -> list[list[int]] | None:
    """The upstream's bytes of each top token, when it sent them all (a partial token's text is U+FFFD)."""
    found = [t.get("bytes") for t in tops]
    return found if found and all(isinstance(b, list) for b in found) else None


def _completion_logprobs(lp: dict[str, Any] | None) -> list[TokenLogprob] | None:
    if not lp or not lp.get("tokens"):
        return None
    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
    return [
        TokenLogprob(token=tok, logprob=val, top=list((top or {}).items()))
        for tok, val, top in zip(lp["tokens"], lp.get("token_logprobs") or (), tops, strict=False)
    ]


def _stop_string(value: Any) -> str | None:
    """vLLM's ``stop_reason``: the stop string that ended a choice (a token id or None otherwise)."""
    return value if isinstance(value, str) else None
