"""Streaming token -> text deltas that never split a UTF-8 character.

vLLM's prefix/read-offset scheme over token ids: each step decodes only a short window
``ids[prefix:]`` and diffs it against ``ids[prefix:read]``, so the cost per token is constant
rather than re-decoding the whole output. Starting the window a token early keeps context-dependent
decoding right (SentencePiece drops the leading space of a window's first token; byte-level BPE
needs the bytes of a character split across tokens). A trailing U+FFFD means the last character is
still incomplete: that part is held back until the bytes that finish it arrive.
"""

from __future__ import annotations

from typing import Protocol

_REPLACEMENT = "\ufffd"
# Prompt tokens decoded as context for the first output token (vLLM uses the same 5).
_PROMPT_CONTEXT = 5
# A UTF-8 character spans at most 4 bytes, so a window still incomplete after this many pending
# tokens is undecodable output (a random model emitting stray bytes), not a split character:
# it is released as is instead of growing the window (and its decode cost) without bound.
_MAX_PENDING_TOKENS = 16


class TokenDecoder(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    def __init__(
        self, tokenizer: TokenDecoder, prompt_token_ids: list[int], skip_special_tokens: bool = True
    ) -> None:
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = list(prompt_token_ids[-_PROMPT_CONTEXT:])
        self._prefix = 0
        self._read = len(self._ids)
        # decode(ids[prefix:read]); None until first needed after the window moved.
        self._prefix_text: str | None = None
        # Characters of decode(ids[prefix:]) already emitted (or belonging to the prompt).
        self._emitted = 0

    def _decode(self, start: int, end: int | None = None) -> str:
        return self._tok.decode(self._ids[start:end], skip_special_tokens=self._skip)

    def add(self, token_id: int) -> str:
        """Append one generated token; return the text it makes final (possibly "")."""
        self._ids.append(token_id)
        if self._prefix_text is None:
            self._prefix_text = self._decode(self._prefix, self._read)
            self._emitted = len(self._prefix_text)
        text = self._decode(self._prefix)
        stable = len(text)
        while stable > self._emitted and text[stable - 1] == _REPLACEMENT:
            stable -= 1
        complete = stable == len(text)
        if not complete and len(self._ids) - self._read > _MAX_PENDING_TOKENS:
            stable, complete = len(text), True
        delta = text[self._emitted : stable] if stable > self._emitted else ""
        self._emitted = max(self._emitted, stable)
        if complete and len(text) > len(self._prefix_text):
            # Window ends on a character boundary: slide it so the next decode stays short.
            self._prefix, self._read = self._read, len(self._ids)
            self._prefix_text = None
        return delta

    def flush(self) -> str:
        """Text still held back at the end of the stream (an unfinished character, as U+FFFD)."""
        text = self._decode(self._prefix)
        delta = text[self._emitted :] if len(text) > self._emitted else ""
        self._emitted = max(self._emitted, len(text))
        return delta
