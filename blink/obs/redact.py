"""PII redaction for logged prompts and outputs: a fixed set of patterns, replaced by a tag.

Regexes catch the common, well-formed cases (emails, card and phone numbers, keys); they are a
safety net for opt-in prompt logging, not a guarantee, which is why prompts are off by default.
"""

from __future__ import annotations

import re

# Order matters: keys and emails first (they contain digits that the number patterns would eat).
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:sk|pk|rk|api|key)[-_][A-Za-z0-9_\-]{12,}\b"), "[KEY]"),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{12,}"), "Bearer [KEY]"),
    (re.compile(r"\b[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+\b"), "[EMAIL]"),
    (re.compile(r"\b\d{3}-\d{2}-\d{4}\b"), "[SSN]"),
    # 13-19 digits, optionally grouped by spaces or dashes: payment card numbers.
    (re.compile(r"\b(?:\d[ \-]?){12,18}\d\b"), "[CARD]"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"), "[IP]"),
    # International or North-American phone numbers with at least 9 digits.
    (re.compile(r"(?<![\w])\+?\d{1,3}?[ .\-]?\(?\d{2,4}\)?[ .\-]?\d{3,4}[ .\-]?\d{3,4}\b"), "[PHONE]"),
)


def redact(text: str) -> str:
    for pattern, tag in _PATTERNS:
        text = pattern.sub(tag, text)
    return text
