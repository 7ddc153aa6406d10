"""Which parts of a chat may be compressed: everything but instructions, the question and code.

A message's text is split into segments; only ``compressible`` ones are ever shortened. Never
compressible: system/developer messages (instructions), the last user message (the question
being asked), assistant messages that carry tool calls (their structure is the protocol), and
fenced code blocks anywhere (dropping a token of code changes its meaning).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A fenced code block (``` or ~~~, optional language), up to its closing fence or the end.
_FENCE = re.compile(r"(```|~~~)[^\n]*\n.*?(?:\1|\Z)", re.S)
_PROTECTED_ROLES = frozenset({"system", "developer"})


@dataclass(slots=True)
class Segment:
    text: str
    compressible: bool


def split_code(text: str) -> list[Segment]:
    """``text`` as alternating prose and fenced-code segments, in order, nothing lost."""
    out: list[Segment] = []
    pos = 0
    for m in _FENCE.finditer(text):
        if m.start() > pos:
            out.append(Segment(text[pos : m.start()], True))
        out.append(Segment(m.group(0), False))
        pos = m.end()
    if pos < len(text):
        out.append(Segment(text[pos:], True))
    return out


def compressible_messages(messages: list[dict[str, Any]]) -> list[int]:
    """Indices of the messages whose text may be compressed (their code blocks still may not)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    out = []
    for i, m in enumerate(messages):
        if i == last_user or m.get("role") in _PROTECTED_ROLES or m.get("tool_calls"):
            continue
        out.append(i)
    return out
