"""Cuts a stream of text deltas into clauses the TTS can speak as soon as each is complete."""

from __future__ import annotations

import re

# A sentence ends at . ! ? (or an ellipsis) followed by a space; a clause at , ; : or a dash.
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:—–]\s")


class ClauseChunker:
    """Emits sentences, clauses long enough to sound natural, and over-long runs at a space.

    The first chunk of an answer is cut earliest: time to first audio is what the user
    notices; later chunks can be longer, and speak with better prosody for it.
    """

    def __init__(self, min_clause_chars: int = 16, first_max_chars: int = 48, max_chars: int = 160) -> None:
        # 16 characters is ~3 words: a shorter clause ("Well, ") sounds clipped on its own.
        self.min_clause_chars = min_clause_chars
        # ~8 words: with no punctuation yet, the first chunk is cut at a space after this.
        self.first_max_chars = first_max_chars
        # ~30 words: a later chunk with no punctuation at all is cut at a space after this.
        self.max_chars = max_chars
        self._buf = ""
        self._emitted = 0

    def reset(self) -> None:
        self._buf, self._emitted = "", 0

    def push(self, text: str) -> list[str]:
        self._buf += text
        out: list[str] = []
        while (cut := self._cut()) is not None:
            chunk, self._buf = self._buf[:cut].strip(), self._buf[cut:]
            if chunk:
                out.append(chunk)
                self._emitted += 1
        return out

    def flush(self) -> str | None:
        chunk, self._buf = self._buf.strip(), ""
        self._emitted = 0
        return chunk or None

    def _cut(self) -> int | None:
        if m := _SENTENCE_END.search(self._buf):
            return m.end()
        for m in _CLAUSE_END.finditer(self._buf):
            if m.end() >= self.min_clause_chars:
                return m.end()
        limit = self.first_max_chars if self._emitted == 0 else self.max_chars
        if len(self._buf) > limit:
            space = self._buf.rfind(" ", 0, len(self._buf))
            if space > 0:
                return space + 1
        return None
