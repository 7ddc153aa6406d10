"""Special-token strings inside chat messages are text, not control tokens.

A chat template joins the client's strings with the model's control tokens (``<|im_start|>``,
``<|eot_id|>``...) into one text, and encoding that text turns every occurrence of a control
token's string into the control token, wherever it came from. A user could then close their own
turn and open a fake system or assistant turn by typing ``<|im_end|>\\n<|im_start|>system``.
OpenAI's API treats such strings in content as plain text; so does Blink. vLLM and a bare
``apply_chat_template`` do not.

How: before rendering, each special-token string inside a client string is wrapped in a
per-render sentinel (private-use characters and a random nonce, so client text cannot forge one);
after rendering, the text is split at the sentinels, the template's own text is encoded as usual
and each wrapped string is encoded as ordinary text. A conversation with no such string renders
and encodes exactly as before, token for token.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# Private-use code points: no vocabulary gives them meaning, and a sentinel also carries a nonce.
_OPEN, _CLOSE = "\ue000", "\ue001"

Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class RenderedChat:
    """A rendered chat prompt: ``text`` as the model reads it, and how to encode it."""

    text: str
    marked: str  # ``text`` with the client's special-token strings still in their sentinels
    nonce: str | None  # None: no sentinels, ``marked`` is ``text``


class ChatLiterals:
    """Marks and encodes the special-token strings clients put inside chat messages."""

    def __init__(self, special_tokens: Iterable[str]) -> None:
        strings = sorted({s for s in special_tokens if s}, key=len, reverse=True)  # longest first
        self._pattern = re.compile("|".join(re.escape(s) for s in strings)) if strings else None

    def mark(self, value: Any) -> tuple[Any, str | None]:
        """``value`` (messages, tools, template arguments) with every special-token string inside
        its strings wrapped in a sentinel, and the sentinel's nonce; ``(value, None)`` when it holds
        none (the common case: nothing is copied)."""
        if self._pattern is None or not _contains(value, self._pattern):
            return value, None
        nonce = secrets.token_hex(8)
        return _map_strings(value, lambda s: self._pattern.sub(  # type: ignore[union-attr]
            lambda m: f"{_OPEN}{nonce}{m.group(0)}{_CLOSE}", s)), nonce

    def unmark(self, text: str, nonce: str | None) -> str:
        """The rendered text as the model reads it (for length checks and logs)."""
        return "".join(piece for piece, _ in _pieces(text, nonce))

    def encode(self, text: str, nonce: str | None, encode: Encode, encode_plain: Encode) -> list[int]:
        """Token ids of rendered ``text``: ``encode`` for the template's text, ``encode_plain``
        for each marked string (it must not produce control tokens)."""
        return [i for piece, marked in _pieces(text, nonce) for i in (encode_plain if marked else encode)(piece)]


def _pieces(text: str, nonce: str | None) -> Iterator[tuple[str, bool]]:
    """``text`` split at its sentinels: (piece, whether it was marked), sentinels removed."""
    if nonce is None:
        yield text, False
        return
    start = 0
    for m in re.finditer(f"{_OPEN}{nonce}(.*?){_CLOSE}", text, re.DOTALL):
        if m.start() > start:
            yield text[start : m.start()], False
        yield m.group(1), True
        start = m.end()
    if start < len(text):
        yield text[start:], False


def _contains(value: Any, pattern: re.Pattern[str]) -> bool:
    if isinstance(value, str):
        return pattern.search(value) is not None
    if isinstance(value, dict):
        return any(_contains(v, pattern) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_contains(v, pattern) for v in value)
    return False


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_strings(v, fn) for v in value)
    return value
