"""PII detection and redaction: one implementation for logs, the cache and the safety filter.

Regexes find candidates; checksums then drop the look-alikes that a bare pattern would flag:
card numbers must pass Luhn, IBANs the ISO 7064 mod-97 check, US SSNs the SSA's allocation
rules (no 000/666/9xx area, no 00 group, no 0000 serial). Regexes are a safety net for the
well-formed cases, not a guarantee, which is why prompt logging is off by default.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PiiMatch:
    kind: str  # key | bearer | email | iban | ssn | card | ip | phone
    start: int
    end: int
    text: str


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum every payment card number carries (ISO/IEC 7812)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_ok(text: str) -> bool:
    """ISO 13616: move the first four characters to the end, letters -> 10..35, mod 97 == 1."""
    s = re.sub(r"[ \-]", "", text).upper()
    if not 15 <= len(s) <= 34:  # Norway's IBAN is the shortest (15), Saint Lucia's the longest (32)
        return False
    rearranged = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def ssn_ok(text: str) -> bool:
    area, group, serial = text.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _digits_ok(check: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda text: check(re.sub(r"\D", "", text))


def _not_decimal(text: str) -> bool:
    """3.14159265 has a phone number's digits but is a decimal number."""
    return re.fullmatch(r"\d+\.\d+", text) is None


# Order matters: keys, emails and IBANs first (they contain digits that the number patterns would eat).
_DETECTORS: tuple[tuple[str, re.Pattern[str], Callable[[str], bool] | None, str], ...] = (
    ("key", re.compile(r"\b(?:sk|pk|rk|api|key)[-_][A-Za-z0-9_\-]{12,}\b"), None, "[KEY]"),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{12,}"), None, "Bearer [KEY]"),
    ("email", re.compile(r"\b[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+\b"), None, "[EMAIL]"),
    # Two letters (country), two check digits, then 11-30 alphanumerics, optionally in groups of four.
    ("iban", re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?\b"), iban_ok, "[IBAN]"),
    ("ssn", re.compile(r"\b\d{3}-\d{2}-\d{4}\b"), ssn_ok, "[SSN]"),
    # 13-19 digits, optionally grouped by spaces or dashes: payment card numbers.
    ("card", re.compile(r"(?<!\d[ \-])\b(?:\d[ \-]?){12,18}\d\b(?![ \-]?\d)"), _digits_ok(luhn_ok), "[CARD]"),
    ("ip", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"), None, "[IP]"),
    # International or North-American phone numbers with at least 9 digits.
    ("phone", re.compile(r"(?<![\w(+])(?<!\d[ .\-])(?:\+?\d{1,3}[ .\-]?)?\(?\d{2,4}\)?[ .\-]?\d{3,4}[ .\-]?\d{3,4}\b(?![ .\-]?\d)"), _not_decimal, "[PHONE]"),
)
_TAGS = {kind: tag for kind, _, _, tag in _DETECTORS}
# Every kind find_pii can report (what a PII check covers).
PII_KINDS = tuple(_TAGS)


def find_pii(text: str) -> list[PiiMatch]:
    """Non-overlapping PII spans in text order; an earlier detector wins an overlap."""
    found: list[PiiMatch] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern, valid, _ in _DETECTORS:
        for m in pattern.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            if valid is not None and not valid(m.group()):
                continue
            found.append(PiiMatch(kind, m.start(), m.end(), m.group()))
            taken.append((m.start(), m.end()))
    return sorted(found, key=lambda p: p.start)


def redact(text: str) -> str:
    """``text`` with each PII span replaced by its tag (``[EMAIL]``, ``[CARD]``...)."""
    matches = find_pii(text)
    if not matches:
        return text
    out, pos = [], 0
    for m in matches:
        out += [text[pos : m.start], _TAGS[m.kind]]
        pos = m.end
    out.append(text[pos:])
    return "".join(out)
