"""PII detection on a labelled list: every true positive found (by kind), no false positive."""

from __future__ import annotations

import pytest

from blink.obs.redact import find_pii, iban_ok, luhn_ok, redact

POSITIVES = [
    ("write to jane.doe@example.com today", "email"),
    ("cc: ops+alerts@mail.example.co.uk", "email"),
    ("call +1 415 555 0100", "phone"),
    ("phone (415) 555-0100 after six", "phone"),
    ("ring 020 7946 0958 in London", "phone"),
    ("+44 20 7946 0958", "phone"),
    ("visa 4111 1111 1111 1111 exp 12/27", "card"),
    ("mastercard 5555-5555-5555-4444", "card"),
    ("amex 378282246310005", "card"),
    ("IBAN DE89 3704 0044 0532 0130 00", "iban"),
    ("send to GB82WEST12345698765432 please", "iban"),
    ("FR14 2004 1010 0505 0001 3M02 606", "iban"),
    ("my ssn is 123-45-6789", "ssn"),
    ("SSN 078-05-1120 on file", "ssn"),
    ("token sk-abcdefghijklmnop1234", "key"),
    ("server at 10.1.2.3", "ip"),
]

NEGATIVES = [
    "the answer is 42, in 2024",
    "order 12345 shipped on 2024-01-15",
    "card 4111 1111 1111 1112 fails Luhn",  # one digit off: not a card, and not a phone either
    "IBAN DE89 3704 0044 0532 0130 01 has a bad check",  # mod-97 fails
    "ssn 000-12-3456 and 666-12-3456 and 123-00-4567 are never issued",
    "ISBN 978-3-16-148410-0",
    "version 3.11.4 of python",
    "pi is 3.14159265",
    "meet at 10:30 in room 204",
    "temperatures of -5 to 12 degrees",
    "email me later, at the office",
    "a ratio of 16:9 and 1080p",
    "DE is Germany and GB82 is a code name",
]


@pytest.mark.parametrize(("text", "kind"), POSITIVES)
def test_true_positives_are_found_and_redacted(text: str, kind: str) -> None:
    found = find_pii(text)
    assert [m.kind for m in found] == [kind], found
    out = redact(text)
    assert found[0].text not in out and f"[{kind.upper()}]" in out


@pytest.mark.parametrize("text", NEGATIVES)
def test_false_positives_are_not_flagged(text: str) -> None:
    assert find_pii(text) == [] and redact(text) == text


def test_checksums() -> None:
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert iban_ok("GB82 WEST 1234 5698 7654 32") and not iban_ok("GB82 WEST 1234 5698 7654 33")
